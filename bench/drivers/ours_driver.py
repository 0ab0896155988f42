"""Benchmark driver for our engine, ``superdialog_core.Runtime`` (runs in the project's venv).

The twin of ``superdialog_driver.py``: the same playbook (``bench/booking.yaml``), the same
scripted conversation (``script.py``), fake models of the same latency, the same harness and
the same JSON on stdout, so ``bench/run.py`` can set the two side by side. The models go
through the engine's public seams (SPEC §1): a ``DirectorModel`` answering the scripted verdict
and a ``TalkerModel`` streaming the scripted reply word by word.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from harness import ModelTimer, NewCall, main
from script import director_verdict, talker_reply, user_line

PLAYBOOK = Path(__file__).parents[1] / "booking.yaml"


class BenchDirector:
    """``DirectorModel``: the scripted verdict of the current turn, after ``delay`` seconds."""

    def __init__(self, timer: ModelTimer) -> None:
        self.turn = 0
        self.delay = 0.0
        self.timer = timer

    async def decide(self, request: Any) -> dict[str, Any]:
        if self.delay > 0:
            self.timer.begin(self.delay)
            await asyncio.sleep(self.delay)
        return director_verdict(self.turn)


class BenchTalker:
    """``TalkerModel``: the scripted reply of the current turn, word by word."""

    def __init__(self, timer: ModelTimer) -> None:
        self.turn = 0
        self.delay = 0.0
        self.timer = timer

    def speak(self, request: Any) -> AsyncIterator[str]:
        return self._stream()

    async def _stream(self) -> AsyncIterator[str]:
        if self.delay > 0:
            self.timer.begin(self.delay)
            await asyncio.sleep(self.delay)
        words = talker_reply(self.turn).split(" ")
        for i, word in enumerate(words):
            yield word if i == len(words) - 1 else word + " "


class OursCall:
    """One Runtime conversation as the harness drives it."""

    def __init__(self, runtime: Any, director: BenchDirector, talker: BenchTalker,
                 timer: ModelTimer) -> None:
        self.runtime, self.director, self.talker, self.timer = runtime, director, talker, timer

    async def turn(self, n: int) -> None:
        self.director.turn = self.talker.turn = n
        await self.runtime.user_turn(user_line(n))

    def events(self) -> int:
        return len(self.runtime.log)

    def set_model_delay(self, seconds: float) -> None:
        self.director.delay = self.talker.delay = seconds


def load() -> tuple[float, NewCall]:
    t0 = time.perf_counter()
    from superdialog_core import Playbook, Runtime

    _ = Runtime  # resolve the lazy export: part of the import cost
    import_s = time.perf_counter() - t0
    playbook = Playbook.load(PLAYBOOK)
    # What a worker's prewarm does (SPEC §10): dateparser's first call is slow and would land,
    # in a thread, inside the first measured turns.
    from superdialog_core.values.coerce import warm_up

    warm_up("en")

    async def new_call(index: int, delay: float) -> OursCall:
        timer = ModelTimer()
        director, talker = BenchDirector(timer), BenchTalker(timer)
        runtime = Runtime(playbook, director=director, talker=talker)
        call = OursCall(runtime, director, talker, timer)
        call.set_model_delay(delay)
        await runtime.start()
        return call

    return import_s, new_call


if __name__ == "__main__":
    main("superdialog-livekit (ours)", load)
