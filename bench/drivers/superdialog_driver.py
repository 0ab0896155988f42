"""Benchmark driver for superdialog 0.3.0's PlaybookAgent (runs in bench/.venvs/superdialog).

Not part of the project: ``bench/run.py`` creates a throwaway Python 3.12 venv with
superdialog 0.3.0 and runs this file there, in a separate process, side by side with
``ours_driver.py``. Both speak the same protocol (``harness.main``): the same playbook, the
same scripted conversation with fake models of the same latency, one JSON object of
measurements on stdout. Modes: ``turns`` (engine cost per turn), ``growth`` (one long call),
``capacity`` (open calls' memory, then Poisson load).
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # else litellm's import waits on the network

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from harness import ModelTimer, NewCall, main
from script import director_verdict, talker_reply, user_line

PLAYBOOK = Path(__file__).parents[1] / "booking.yaml"


class FakeDirector:
    """Director seam (``complete``): the scripted JSON verdict of the current turn."""

    def __init__(self, timer: ModelTimer) -> None:
        self.turn = 0
        self.delay = 0.0
        self.timer = timer

    async def complete(self, messages: list[dict[str, str]], **kwargs: Any) -> str:
        if self.delay > 0:
            self.timer.begin(self.delay)
            await asyncio.sleep(self.delay)
        return json.dumps(director_verdict(self.turn))


class FakeTalker:
    """Talker seam (``stream``): the scripted reply word by word, first word after ``delay``."""

    def __init__(self, timer: ModelTimer) -> None:
        self.turn = 0
        self.delay = 0.0
        self.timer = timer

    async def stream(self, messages: list[dict[str, str]], **kwargs: Any) -> AsyncIterator[str]:
        if self.delay > 0:
            self.timer.begin(self.delay)
            await asyncio.sleep(self.delay)
        words = talker_reply(self.turn).split(" ")
        for i, word in enumerate(words):
            yield word if i == len(words) - 1 else word + " "


async def _http(**kwargs: Any) -> tuple[int, Any]:
    return 200, {}


class SuperdialogCall:
    """One PlaybookAgent conversation as the harness drives it."""

    def __init__(self, agent: Any, director: FakeDirector, talker: FakeTalker,
                 timer: ModelTimer) -> None:
        self.agent, self.director, self.talker, self.timer = agent, director, talker, timer

    async def turn(self, n: int) -> None:
        self.director.turn = self.talker.turn = n
        await self.agent.turn(user_line(n))

    def events(self) -> int:
        return len(self.agent.event_log.events)

    def set_model_delay(self, seconds: float) -> None:
        self.director.delay = self.talker.delay = seconds


def load() -> tuple[float, NewCall]:
    t0 = time.perf_counter()
    from superdialog.playbook.agent import PlaybookAgent
    from superdialog.playbook.models import Playbook

    import_s = time.perf_counter() - t0
    playbook = Playbook.load(str(PLAYBOOK))

    async def new_call(index: int, delay: float) -> SuperdialogCall:
        timer = ModelTimer()
        director, talker = FakeDirector(timer), FakeTalker(timer)
        agent = PlaybookAgent(playbook, talker, director, _http, token_budget=4000,
                              barrier_timeout=0.4)
        call = SuperdialogCall(agent, director, talker, timer)
        call.set_model_delay(delay)
        await agent.runtime.start()
        return call

    return import_s, new_call


if __name__ == "__main__":
    main("superdialog 0.3.0", load)
