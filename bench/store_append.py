"""Append latency of the durable stores side by side: Redis, SQLite and JSONL, in one run.

    python bench/store_append.py [--quick] [--json]

What a call waits for after each turn (off the event loop for the file stores, a network
round trip for Redis): one ``append`` of a turn's batch (5 events of a realistic size). Each
store gets the same sessions and batches; rounds alternate the order of the stores so all
three see the machine's fast and slow phases (it is shared; only same-run ratios count).
Every store is durable per append: JSONL fsyncs the file, SQLite commits with
``synchronous=FULL`` in WAL mode, and the Redis server (started here on 127.0.0.1, as the
tests do) runs with ``appendonly yes`` and ``appendfsync always``. Reported: p50 and p95 in ms
per store, and each store's ratio to JSONL (the worker's default store).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from redis_server import RedisServer  # noqa: E402
from superdialog_core import JsonlStore, SQLiteStore  # noqa: E402
from superdialog_core import events as ev  # noqa: E402
from superdialog_core.log.eventlog import EventLog  # noqa: E402
from superdialog_core.log.redis_store import RedisStore  # noqa: E402


def turn_batch(log: EventLog, turn: int) -> list[ev.Event]:
    """One turn's events: the caller, the verdict and its slot write, the reply."""
    start = log.version
    log.append(ev.Utterance(role="user", text=f"We are {2 + turn % 6} people on Friday at {turn % 12 + 8}"))
    log.append(ev.Verdict(latency_ms=312.5, attempts=1, verdict={"slots": {"party_size": 2 + turn % 6}}))
    log.append(ev.SlotWrite(key="party_size", value=2 + turn % 6, status="accepted", by="director"))
    log.append(ev.Advance(from_="booking.collect", to="booking.confirm", rule_id="booking.collect.0", by="director"))
    log.append(ev.Utterance(role="assistant", text="Lovely, and what time would suit you best?",
                            spoke_from_version=start + 1, kind="talker"))
    return log.since(start)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(stores: dict[str, Any], sessions: int, turns: int) -> dict[str, list[float]]:
    latencies: dict[str, list[float]] = {name: [] for name in stores}
    logs = {name: [EventLog() for _ in range(sessions)] for name in stores}
    names = list(stores)
    for turn in range(turns):
        order = names if turn % 2 == 0 else names[::-1]
        for session in range(sessions):
            for name in order:
                batch = turn_batch(logs[name][session], turn)
                started = time.perf_counter()
                await stores[name].append(f"bench-{session}", batch)
                latencies[name].append((time.perf_counter() - started) * 1000)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer appends (smoke test)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    sessions, turns = (4, 5) if args.quick else (20, 20)
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp) / "redis") as server:
        async def run() -> dict[str, list[float]]:
            stores = {"jsonl": JsonlStore(Path(tmp) / "logs"),
                      "sqlite": SQLiteStore(Path(tmp) / "logs.db"),
                      "redis": RedisStore(server.url)}
            await stores["redis"].ping()
            try:
                return await measure(stores, sessions, turns)
            finally:
                await stores["redis"].aclose()
                stores["sqlite"].close()

        latencies = asyncio.run(run())
    results: dict[str, Any] = {"appends_per_store": sessions * turns, "events_per_append": 5,
                               "stores": {}}
    base = statistics.median(latencies["jsonl"])
    base95 = percentile(latencies["jsonl"], 0.95)
    for name, samples in latencies.items():
        p50, p95 = statistics.median(samples), percentile(samples, 0.95)
        results["stores"][name] = {"p50_ms": round(p50, 3), "p95_ms": round(p95, 3),
                                   "p50_vs_jsonl": round(p50 / base, 3),
                                   "p95_vs_jsonl": round(p95 / base95, 3)}
    if args.json:
        print(json.dumps(results))
        return
    print(f"append latency, {sessions * turns} appends of 5 events per store (durable each time)")
    for name, row in results["stores"].items():
        print(f"  {name:>6}: p50 {row['p50_ms']:7.3f} ms  p95 {row['p95_ms']:7.3f} ms  "
              f"({row['p50_vs_jsonl']:.2f}x / {row['p95_vs_jsonl']:.2f}x of JSONL)")


if __name__ == "__main__":
    main()
