"""Engine CPU time per turn on the dental example, and turn 10 vs turn 1,000 of one long call.

    python bench/turn.py [--quick] [--json]

Scripted zero-latency models (SPEC §1's ``DirectorModel``/``TalkerModel`` seams) drive
``../shared/examples/dental_booking.yaml``: every turn the caller gives a changed name and
reason, so each turn logs the caller's words, slot writes (volunteered for the details step),
the verdict and a streamed Talker reply. The Director never advances, so the call stays at
``visit.greet`` for as long as the benchmark runs (``visit.details`` has a turn budget that
would end a long call at the hand-off). What is timed is ``time.process_time()`` around
``Runtime.user_turn``: the engine's own CPU, models excluded.

Several calls are run one after the other and the windows around turn 10 and turn 1,000 are
compared within each call (median of the window), then across calls (median), so a slow
phase of this shared machine does not fall on one window only. ``bench/run.py`` holds the
side-by-side comparison with superdialog 0.3.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DENTAL = ROOT.parent / "shared" / "examples" / "dental_booking.yaml"
if not DENTAL.is_file():  # a lone clone: the tests keep a copy of the shared examples
    DENTAL = ROOT / "tests" / "fixtures" / "examples" / "dental_booking.yaml"
NAMES = ["Ana Lopez", "Ben Okafor", "Chloe Martin", "Dev Patel", "Eva Novak"]
REASONS = ["checkup", "cleaning", "pain"]


def user_line(turn: int) -> str:
    return f"My name is {NAMES[turn % 5]}, it's for a {REASONS[turn % 3]}"


def verdict(turn: int) -> dict[str, Any]:
    return {"slots": {"patient_name": NAMES[turn % 5], "reason": REASONS[turn % 3]},
            "spans": {"patient_name": NAMES[turn % 5]}}


class Director:
    """Zero-latency ``DirectorModel`` answering the scripted verdict of the current turn."""

    turn = 0

    async def decide(self, request: Any) -> dict[str, Any]:
        return verdict(self.turn)


class Talker:
    """Zero-latency ``TalkerModel`` streaming a reply word by word."""

    turn = 0

    def speak(self, request: Any) -> AsyncIterator[str]:
        return self._stream()

    async def _stream(self) -> AsyncIterator[str]:
        words = f"Thanks, {NAMES[self.turn % 5]}. What number can we reach you on?".split(" ")
        for i, word in enumerate(words):
            yield word if i == len(words) - 1 else word + " "


async def one_call(turns: int) -> list[float]:
    from superdialog_core import Playbook, Runtime

    playbook = Playbook.load(DENTAL)
    director, talker = Director(), Talker()
    runtime = Runtime(playbook, director=director, talker=talker, call_start={"clinic_id": "c1"})
    await runtime.start()
    cpu_ms: list[float] = []
    for turn in range(turns):
        director.turn = talker.turn = turn
        c0 = time.process_time()
        await runtime.user_turn(user_line(turn))
        cpu_ms.append((time.process_time() - c0) * 1000)
    assert runtime.state.checkpoint == "visit.greet", runtime.state.checkpoint
    return cpu_ms


def window(values: list[float], center: int, half: int) -> float:
    return statistics.median(values[max(1, center - half): center + half + 1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(calls: int, turns: int, half: int) -> dict[str, Any]:
    from superdialog_core.values.coerce import warm_up

    warm_up("en")  # what a worker's prewarm does; dateparser's first call is slow
    runs = [await one_call(turns) for _ in range(calls)]
    steady = [v for run in runs for v in run[1:]]
    late = turns - 1 - half
    at10 = [window(run, 10, half) for run in runs]
    atn = [window(run, late, half) for run in runs]
    ratio = statistics.median(atn) / statistics.median(at10)
    return {
        "playbook": "dental_booking.yaml",
        "calls": calls,
        "turns_per_call": turns,
        "cpu_ms_median": round(statistics.median(steady), 4),
        "cpu_ms_p95": round(percentile(steady, 0.95), 4),
        "cpu_ms_at_turn_10": round(statistics.median(at10), 4),
        f"cpu_ms_at_turn_{late}": round(statistics.median(atn), 4),
        "ratio_late_vs_10": round(ratio, 3),
        "ratio_target": 1.2,
        "ratio_met": ratio <= 1.2,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 calls of 120 turns (smoke test)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    # The example's env references point at the clinic's API; no tool runs in this benchmark.
    os.environ.setdefault("CLINIC_API_BASE", "http://127.0.0.1:9")
    os.environ.setdefault("CLINIC_API_TOKEN", "bench")
    calls, turns, half = (3, 120, 5) if args.quick else (3, 1_000, 10)
    results = asyncio.run(measure(calls, turns, half))
    if args.json:
        print(json.dumps(results))
        return 0
    late = turns - 1 - half
    print(f"engine CPU per turn, dental example, {calls} calls x {turns} turns, zero-latency models")
    print(f"  median {results['cpu_ms_median']:.3f} ms   p95 {results['cpu_ms_p95']:.3f} ms")
    print(f"  turn 10: {results['cpu_ms_at_turn_10']:.3f} ms   turn {late}: "
          f"{results[f'cpu_ms_at_turn_{late}']:.3f} ms   ratio {results['ratio_late_vs_10']:.2f}x "
          f"(target ≤ 1.2x: {'met' if results['ratio_met'] else 'NOT met'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
