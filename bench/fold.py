"""Cost of applying one event to the incremental state at log sizes 10, 1,000 and 10,000.

    python bench/fold.py [--quick]

The state is a fold over the log maintained incrementally (SPEC §5): applying an event must
cost the same at event 10 as at event 10,000 (target: within 1.2x) and a logged event must
take at most 500 bytes (SPEC §14). Both are measured here in one run: a realistic stream of
events (utterances, slot writes with changing values, verdicts, tool calls and results,
notes, advances) is appended to an ``EventLog`` and applied to a ``ConversationState``;
the time per event is taken over a window of events just after each log size, as the
minimum of several repetitions (the machine is shared and noisy; the minimum is the least
disturbed reading). Memory per event is the traced allocation of the log and its events
divided by their number.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from superdialog_core import events as ev  # noqa: E402
from superdialog_core.log.eventlog import EventLog  # noqa: E402
from superdialog_core.log.state import ConversationState  # noqa: E402
from superdialog_core.playbook import Playbook  # noqa: E402

SIZES = (10, 1_000, 10_000)


def event_stream(start: int = 0) -> Iterator[ev.Event]:
    """An endless, realistic event stream for the benchmark playbook's collect step."""
    yield ev.SessionStart(session_id="bench", playbook_hash="x", anchor="2026-11-30T10:00:00+01:00",
                          timezone="Europe/Rome")
    yield ev.Advance(to="booking.greet", rule_id="init", by="init")
    yield ev.Advance(from_="booking.greet", to="booking.collect", rule_id="booking.greet.0",
                     by="director")
    turn = start
    while True:
        turn += 1
        n = 2 + turn % 8
        yield ev.Utterance(role="user", text=f"We are {n} people at {17 + turn % 5}:00 please")
        yield ev.SlotWrite(key="party_size", value=n, status="accepted", by="director")
        yield ev.SlotWrite(key="time", value=f"{17 + turn % 5}:00", status="accepted", by="director")
        yield ev.Verdict(verdict={"slots": {"party_size": n}}, latency_ms=1.0, user_version=None)
        if turn % 10 == 0:
            yield ev.ToolCall(tool="availability", args={"method": "GET", "url": "http://x/a"})
            yield ev.ToolResult(tool="availability", ok=True, status=200, data={"slots": [1, 2]},
                                store_as="availability")
            yield ev.SteeringNote(text="Offer the earliest time first.")
        yield ev.Utterance(role="assistant", text=f"Noted, {n} guests. Which day?",
                           spoke_from_version=None, kind="talker")
        if turn % 10 == 0:
            yield ev.NoteConsumed(upto=0)


def _fresh(playbook: Playbook, count: int) -> tuple[EventLog, ConversationState, Iterator[ev.Event]]:
    log = EventLog(clock=lambda: 0.0)
    state = ConversationState(playbook)
    stream = event_stream()
    for _ in range(count):
        state.apply(log.append(next(stream)))
    return log, state, stream


def apply_cost_us(playbook: Playbook, size: int, window: int, repeats: int) -> float:
    """Minimum over ``repeats`` of the mean µs to append+apply ``window`` events after ``size``."""
    best = float("inf")
    for _ in range(repeats):
        log, state, stream = _fresh(playbook, size)
        batch = [next(stream) for _ in range(window)]
        t0 = time.perf_counter()
        for event in batch:
            state.apply(log.append(event))
        best = min(best, (time.perf_counter() - t0) / window * 1e6)
    return best


def bytes_per_event(playbook: Playbook, count: int) -> float:
    stream = event_stream()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    log = EventLog(clock=time.time)
    for _ in range(count):
        log.append(next(stream))
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    size = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    return size / len(log)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke test)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    playbook = Playbook.load(ROOT / "bench" / "booking.yaml")
    repeats, window = (3, 200) if args.quick else (9, 1_000)
    costs = {size: apply_cost_us(playbook, size, window, repeats) for size in SIZES}
    per_event = bytes_per_event(playbook, 2_000 if args.quick else 10_000)
    ratio = costs[SIZES[-1]] / costs[SIZES[0]]
    results: dict[str, Any] = {
        "apply_us": {str(k): round(v, 3) for k, v in costs.items()},
        "ratio_10000_vs_10": round(ratio, 3),
        "ratio_target": 1.2,
        "ratio_met": ratio <= 1.2,
        "bytes_per_event": round(per_event, 1),
        "bytes_target": 500,
        "bytes_met": per_event <= 500,
    }
    if args.json:
        print(json.dumps(results))
        return 0
    print("append + apply one event (min of", repeats, "runs of", window, "events)")
    for size, cost in costs.items():
        print(f"  at log size {size:>6,}: {cost:7.2f} µs  ({cost / costs[SIZES[0]]:.2f}x of size 10)")
    print(f"  ratio 10,000 vs 10: {ratio:.2f}x (target ≤ 1.2x: {'met' if ratio <= 1.2 else 'NOT met'})")
    print(f"memory per logged event: {per_event:.0f} bytes (target ≤ 500: "
          f"{'met' if per_event <= 500 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
