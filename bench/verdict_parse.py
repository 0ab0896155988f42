"""Cost of finding the verdict in a Director answer at 1 KB, 10 KB and the 64 KiB cap.

    python bench/verdict_parse.py [--quick] [--json]

Parsing must be linear in the answer's length (SPEC §13): the time per answer at 10 KB and
at 64 KiB is printed as a ratio to the 1 KB time, next to the ratio of the lengths (the
linear target). Four shapes are measured, each the minimum of several repetitions (the
machine is shared and noisy; the minimum is the least disturbed reading):

- ``prose``: words around one verdict object at the end (what a chatty model sends);
- ``braces``: ``{`` repeated (the attack that took 2.7 s at 80 KB before the linear scan);
- ``nested``: ``{x`` ... ``}`` nesting that never parses (every span fails);
- ``fenced``: a fenced json block after prose.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from superdialog_core.roles.verdict import VerdictError, parse_verdict  # noqa: E402

SIZES = (1_000, 10_000, 64 * 1024)
VERDICT = '{"slots": {"party_size": 4}, "advance": null, "note": "ok"}'


def prose(size: int) -> str:
    words = ("the caller said four of us on tuesday evening " * (size // 40 + 1))
    return words[: size - len(VERDICT) - 1] + " " + VERDICT


def braces(size: int) -> str:
    return "{" * size


def nested(size: int) -> str:
    return "{x" * (size // 4) + "}" * (size // 4)


def fenced(size: int) -> str:
    block = f"\n```json\n{VERDICT}\n```\n"
    return ("word " * size)[: size - len(block)] + block


SHAPES: dict[str, Callable[[int], str]] = {
    "prose": prose, "braces": braces, "nested": nested, "fenced": fenced,
}


def measure(text: str, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        with contextlib.suppress(VerdictError):
            parse_verdict(text)
        best = min(best, time.perf_counter() - started)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke test)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    repeats = 3 if args.quick else 15
    results: dict[str, dict[str, float]] = {}
    for name, make in SHAPES.items():
        results[name] = {str(size): measure(make(size), repeats) for size in SIZES}
    if args.json:
        print(json.dumps(results))
        return 0
    print(f"parse_verdict, min of {repeats} runs; ratio to the 1 KB time (linear target: "
          f"{SIZES[1] / SIZES[0]:.0f}x at 10 KB, {SIZES[2] / SIZES[0]:.1f}x at 64 KiB)")
    for name, times in results.items():
        base = times[str(SIZES[0])]
        cells = [f"{times[str(s)] * 1e3:8.3f} ms ({times[str(s)] / base:6.1f}x)" for s in SIZES]
        print(f"  {name:7} 1 KB {cells[0]}   10 KB {cells[1]}   64 KiB {cells[2]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
