"""Engine-neutral measurement code shared by both drivers (stdlib only: runs on 3.10 to 3.12).

Both engines are measured by the same code so a ratio compares engines, not harnesses. A driver
wraps its engine in a ``Call`` (one conversation: ``await call.turn(n)`` runs user turn ``n``
of the script, ``call.events()`` counts its logged events) and gives its fake models a
``ModelTimer``, which records the nominal intervals the models were busy. Engine overhead of a
turn is then its wall time minus the union of those intervals: time spent before a model was
called, after it answered, and any event-loop lag that stretched a model's sleep (other calls'
engine work) all count as overhead, which is what a caller waits for beyond the models.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import statistics
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol


class Call(Protocol):
    """One open conversation of either engine, as the harness drives it."""

    timer: ModelTimer

    async def turn(self, n: int) -> None: ...

    def events(self) -> int: ...

    def set_model_delay(self, seconds: float) -> None: ...


class ModelTimer:
    """The nominal busy intervals of one call's fake models during the turn in flight."""

    __slots__ = ("intervals",)

    def __init__(self) -> None:
        self.intervals: list[tuple[float, float]] = []

    def begin(self, nominal_s: float) -> None:
        """A model was called now and (nominally) answers ``nominal_s`` later."""
        if nominal_s > 0:
            t = time.perf_counter()
            self.intervals.append((t, t + nominal_s))

    def take(self) -> float:
        """Seconds covered by the union of the recorded intervals; clears them."""
        spans = sorted(self.intervals)
        self.intervals.clear()
        total, end = 0.0, float("-inf")
        for a, b in spans:
            if a > end:
                total += b - a
                end = b
            elif b > end:
                total += b - end
                end = b
        return total


NewCall = Callable[[int, float], Awaitable[Call]]
"""Opens call number ``i`` whose fake models answer after ``delay`` seconds."""


def rss_kb() -> int:
    """Current (not peak) resident set size in KiB, from /proc (Linux)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") // 1024


def peak_rss_kb() -> int:
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


async def sequential(call: Call, first: int, turns: int) -> dict[str, Any]:
    """Run turns ``first .. first+turns-1`` back to back; CPU and wall per turn in ms.

    ``total_cpu_ms`` is process CPU over the whole loop: if an engine left work running after
    its turn returned, it shows there even though the per-turn figures miss it.
    """
    cpu_ms: list[float] = []
    wall_ms: list[float] = []
    c_start = time.process_time()
    for n in range(first, first + turns):
        c0, w0 = time.process_time(), time.perf_counter()
        await call.turn(n)
        wall_ms.append((time.perf_counter() - w0) * 1000)
        cpu_ms.append((time.process_time() - c0) * 1000)
    await asyncio.sleep(0)
    return {
        "cpu_ms": cpu_ms,
        "wall_ms": wall_ms,
        "total_cpu_ms": (time.process_time() - c_start) * 1000,
    }


class PauseMonitor:
    """Longest stall of the event loop and longest GC collection while it runs.

    A ticker task sleeps 1 ms at a time; any extra delay before it runs again is time the loop
    could not serve another call (a long synchronous stretch of engine code or a collection).
    ``gc.callbacks`` time each collection separately, by generation.
    """

    def __init__(self) -> None:
        self.max_lag_ms = 0.0
        self.gc_ms: dict[int, float] = {0: 0.0, 1: 0.0, 2: 0.0}
        self.gc_count: dict[int, int] = {0: 0, 1: 0, 2: 0}
        self._gc_t0 = 0.0
        self._task: asyncio.Task[None] | None = None

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter()
        else:
            gen = int(info.get("generation", 0))
            ms = (time.perf_counter() - self._gc_t0) * 1000
            self.gc_ms[gen] = max(self.gc_ms[gen], ms)
            self.gc_count[gen] += 1

    async def _tick(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            lag = (time.perf_counter() - t - 0.001) * 1000
            self.max_lag_ms = max(self.max_lag_ms, lag)

    def __enter__(self) -> PauseMonitor:
        gc.callbacks.append(self._on_gc)
        self._task = asyncio.get_running_loop().create_task(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._on_gc)
        if self._task is not None:
            self._task.cancel()

    def result(self) -> dict[str, Any]:
        return {
            "max_loop_lag_ms": self.max_lag_ms,
            "max_gc_ms": max(self.gc_ms.values()),
            "max_gc_ms_by_generation": {str(k): v for k, v in self.gc_ms.items()},
            "gc_collections": {str(k): v for k, v in self.gc_count.items()},
        }


async def growth(new_call: NewCall, windows: Sequence[int], half_width: int,
                 pause_turns: int) -> dict[str, Any]:
    """Per-turn cost around turn ``w`` of a call, for each ``w`` in ``windows``, measured together.

    One call per window is driven (unmeasured) to turn ``w - half_width``; then the calls take
    their window turns in interleaved, rotating order, so the machine's fast and slow phases
    fall on every window alike and the ratio between windows is a same-moment comparison.
    Afterwards the longest call runs ``pause_turns`` more turns under a ``PauseMonitor`` (kept
    out of the timed part, since its ticker costs CPU): the longest pause at that length.
    """
    calls: dict[int, tuple[Call, int]] = {}
    for i, w in enumerate(windows):
        call = await new_call(i, 0.0)
        lo = max(1, w - half_width)
        await sequential(call, 0, lo)
        calls[w] = (call, lo)
    cpu: dict[int, list[float]] = {w: [] for w in windows}
    wall: dict[int, list[float]] = {w: [] for w in windows}
    order = list(windows)
    for k in range(2 * half_width + 1):
        rotated = order[k % len(order):] + order[: k % len(order)]
        for w in rotated:
            call, lo = calls[w]
            r = await sequential(call, lo + k, 1)
            cpu[w].append(r["cpu_ms"][0])
            wall[w].append(r["wall_ms"][0])
    out: dict[str, Any] = {"windows": {}, "interleaved": True}
    first, last = windows[0], windows[-1]
    for w in windows:
        call, lo = calls[w]
        out["windows"][str(w)] = {
            "turns": [lo, lo + 2 * half_width],
            "events_after": call.events(),
            "cpu_ms_median": statistics.median(cpu[w]),
            "wall_ms_median": statistics.median(wall[w]),
            "cpu_ms_p95": percentile(cpu[w], 95),
            "cpu_ms": cpu[w],
        }
    # the same interleaving step of the last and the first window: one ratio per step
    out["step_ratios_last_vs_first"] = [b / a for a, b in zip(cpu[first], cpu[last], strict=True)
                                          if a > 0]
    if pause_turns:
        call, lo = calls[last]
        begin = lo + 2 * half_width + 1
        with PauseMonitor() as mon:
            await sequential(call, begin, pause_turns)
        out["pause"] = {"turns": [begin, begin + pause_turns], **mon.result()}
    return out


async def memory(new_call: NewCall, calls: int, min_events: int,
                 traced_calls: int, traced_more_turns: int) -> tuple[list[Call], dict[str, Any]]:
    """Open ``calls`` calls of at least ``min_events`` events; RSS and traced bytes per call.

    The first call is opened before the baseline so lazy imports and caches it warms are not
    charged to the others. RSS delta is what the process really pays (allocator slack
    included); tracemalloc over a small extra set gives Python-level bytes per call and per
    logged event (the extra calls run ``traced_more_turns`` more turns for the per-event figure).
    """

    async def open_call(i: int) -> tuple[Call, int]:
        call = await new_call(i, 0.0)
        n = 0
        while call.events() < min_events:
            await call.turn(n)
            n += 1
        return call, n

    first, turns_each = await open_call(0)
    opened = [first]
    gc.collect()
    rss0 = rss_kb()
    t0 = time.perf_counter()
    for i in range(1, calls):
        opened.append((await open_call(i))[0])
    open_s = time.perf_counter() - t0
    gc.collect()
    rss1 = rss_kb()
    events = [c.events() for c in opened]

    tracemalloc.start()
    gc.collect()
    traced0 = tracemalloc.get_traced_memory()[0]
    extra = [(await open_call(calls + i))[0] for i in range(traced_calls)]
    gc.collect()
    traced1 = tracemalloc.get_traced_memory()[0]
    ev0 = sum(c.events() for c in extra)
    for c in extra:
        for n in range(turns_each, turns_each + traced_more_turns):
            await c.turn(n)
    gc.collect()
    traced2 = tracemalloc.get_traced_memory()[0]
    ev1 = sum(c.events() for c in extra)
    tracemalloc.stop()
    del extra
    gc.collect()

    t = time.perf_counter()
    gc.collect()
    full_gc_ms = (time.perf_counter() - t) * 1000
    return opened, {
        "calls": calls,
        "turns_per_call": turns_each,
        "events_per_call_median": statistics.median(events),
        "open_s": open_s,
        "rss_per_call_kib": (rss1 - rss0) / max(1, calls - 1),
        "rss_before_kib": rss0,
        "rss_after_kib": rss1,
        "traced_per_call_kib": (traced1 - traced0) / 1024 / max(1, traced_calls),
        "traced_per_event_bytes": (traced2 - traced1) / max(1, ev1 - ev0),
        "traced_events_added": ev1 - ev0,
        "full_gc_ms_with_calls_open": full_gc_ms,
        "gc_tracked_objects": len(gc.get_objects()),
    }


async def _offer(calls: Sequence[Call], rate: float, seconds: float, warm_s: float,
                 next_turn: list[int], rng: random.Random, max_in_flight: int) -> dict[str, Any]:
    """Poisson arrivals at ``rate`` turns/s for ``seconds``, each on a random idle call."""
    idle = list(range(len(calls)))
    overhead_ms: list[float] = []
    wall_ms: list[float] = []
    state = {"done": 0, "busy": 0, "measured_done": 0}
    tasks: set[asyncio.Task[None]] = set()
    start = time.perf_counter()
    measure_from = start + warm_s
    end = start + seconds

    async def one(i: int, t_arrival: float) -> None:
        call = calls[i]
        n = next_turn[i]
        next_turn[i] += 1
        call.timer.intervals.clear()
        try:
            await call.turn(n)
        finally:
            w1 = time.perf_counter()
            model_s = call.timer.take()
            idle.append(i)
            state["done"] += 1
            if t_arrival >= measure_from:
                state["measured_done"] += 1
                # from arrival: a turn that waited for the loop before starting still waited
                wall_ms.append((w1 - t_arrival) * 1000)
                overhead_ms.append((w1 - t_arrival - model_s) * 1000)

    gc_ms: list[float] = []  # every collection of generation 2 during the step
    gc_t0 = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            gc_t0[0] = time.perf_counter()
        else:
            gc_ms.append((time.perf_counter() - gc_t0[0]) * 1000)

    gc.callbacks.append(on_gc)
    t_next = start + rng.expovariate(rate)
    offered = measured_offered = 0
    saturated = False
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        while t_next <= now and t_next < end:
            offered += 1
            if t_next >= measure_from:
                measured_offered += 1
            if not idle or len(tasks) >= max_in_flight:
                state["busy"] += 1
                saturated = True
            else:
                i = idle.pop(rng.randrange(len(idle)))
                task = asyncio.get_running_loop().create_task(one(i, t_next))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            t_next += rng.expovariate(rate)
        if saturated:
            break
        await asyncio.sleep(max(0.0, min(t_next, end) - time.perf_counter()))
    elapsed = time.perf_counter() - start
    drain0 = time.perf_counter()
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
    gc.callbacks.remove(on_gc)
    measured_s = max(1e-9, min(elapsed, seconds) - warm_s)
    return {
        "offered_rate": rate,
        "offered": offered,
        "completed": state["done"],
        "measured_turns": len(overhead_ms),
        "achieved_rate": state["measured_done"] / measured_s if not saturated else 0.0,
        "refused_busy": state["busy"],
        "saturated": saturated,
        "drain_s": time.perf_counter() - drain0,
        "overhead_ms_p50": percentile(overhead_ms, 50),
        "overhead_ms_p95": percentile(overhead_ms, 95),
        "overhead_ms_p99": percentile(overhead_ms, 99),
        "overhead_ms_max": max(overhead_ms) if overhead_ms else float("nan"),
        "wall_ms_p50": percentile(wall_ms, 50),
        # full collections stall every call in the process at once: a knee in p95 that
        # coincides with them is the collector, not the per-turn work
        "gen2_collections": len(gc_ms),
        "gen2_longest_ms": max(gc_ms, default=0.0),
    }


async def capacity(calls: Sequence[Call], *, start_rate: float, factor: float, step_s: float,
                   warm_s: float, limit_ms: float, max_rate: float, refine: int,
                   seed: int = 7, first_turn: int = 10, min_samples: int = 150,
                   max_step_s: float = 6.0) -> dict[str, Any]:
    """Raise the Poisson arrival rate until overhead p95 exceeds ``limit_ms``; bisect a little.

    A step passes when overhead p95 ≤ ``limit_ms`` (overhead counted from each turn's arrival,
    so a backlog shows) and no arrival found 90 % of the calls busy. The sustained rate is the
    highest passing offered rate. Then a closed-loop run (50 calls taking turns back
    to back) gives the saturation throughput: the most turns per second the process completes
    at all, whatever the latency (``saturation``).
    """
    rng = random.Random(seed)
    next_turn = [first_turn] * len(calls)
    max_in_flight = max(1, len(calls) * 9 // 10)
    steps: list[dict[str, Any]] = []

    def passed(s: dict[str, Any]) -> bool:
        # a turn's time counts from its arrival, so falling behind shows in the overhead
        return not s["saturated"] and s["overhead_ms_p95"] <= limit_ms

    async def step(rate: float) -> dict[str, Any]:
        # enough turns for a p95 at low rates, without dragging the high ones out
        seconds = min(max(step_s, warm_s + min_samples / rate), max_step_s)
        s = await _offer(calls, rate, seconds, warm_s, next_turn, rng, max_in_flight)
        s["seconds"] = seconds
        s["passed"] = passed(s)
        steps.append(s)
        await asyncio.sleep(0.05)
        return s

    best = 0.0
    rate = start_rate
    fail: float | None = None
    while rate <= max_rate:
        s = await step(rate)
        if not s["passed"]:
            fail = rate
            break
        best = rate
        rate *= factor
    lo, hi = best, fail
    for _ in range(refine if hi is not None else 0):
        mid = (lo + hi) / 2 if lo else hi / factor
        s = await step(mid)
        if s["passed"]:
            lo = mid
        else:
            hi = mid
    best = lo
    sat = await saturation(calls, seconds=max(step_s, 3 * warm_s), warm_s=warm_s,
                           workers=min(50, len(calls)), next_turn=next_turn)
    failed = [st["offered_rate"] for st in steps if not st["passed"]]
    return {
        "sustained_turns_per_s": best,
        # when not even the lowest rate passed, the sustained rate is below this
        "lowest_failed_rate": min(failed) if failed else None,
        "saturation": sat,
        "limit_ms": limit_ms,
        "capped": fail is None,
        "max_rate_tried": max_rate,
        "steps": steps,
        "turns_per_call_after": statistics.median(next_turn),
    }


async def saturation(calls: Sequence[Call], *, seconds: float, warm_s: float, workers: int,
                     next_turn: list[int]) -> dict[str, Any]:
    """Closed loop: ``workers`` calls take turns back to back; completed turns per second.

    Enough workers to keep the CPU busy (each turn waits 20 ms on its models, so a few dozen
    in flight saturate one core for either engine), few enough that turns keep completing
    inside the window. Turns completing inside ``[warm_s, seconds]`` are counted, whenever
    they started.
    """
    start = time.perf_counter()
    measure_from, end = start + warm_s, start + seconds
    done = [0]

    async def worker(i: int) -> None:
        call = calls[i]
        while time.perf_counter() < end:
            n = next_turn[i]
            next_turn[i] += 1
            await call.turn(n)
            call.timer.intervals.clear()
            if measure_from <= time.perf_counter() <= end:
                done[0] += 1

    await asyncio.gather(*(worker(i) for i in range(min(workers, len(calls)))))
    return {"turns_per_s": done[0] / (seconds - warm_s), "workers": workers,
            "seconds": seconds, "warm_s": warm_s, "drain_s": time.perf_counter() - end}


def summarize(values: Sequence[float]) -> dict[str, float]:
    """Median, p95, min, max and count: the shape every figure is reported with."""
    return {
        "median": statistics.median(values) if values else float("nan"),
        "p95": percentile(values, 95),
        "min": min(values) if values else float("nan"),
        "max": max(values) if values else float("nan"),
        "n": len(values),
    }



async def _drive(args: Any, new_call: NewCall) -> dict[str, Any]:
    if args.mode == "turns":
        # turn 0 advances to the collecting step and pays first-use costs: the steady state
        # (every later turn) is what "cost per turn" means here, so it is reported apart
        cpu: list[float] = []
        wall: list[float] = []
        first_cpu: list[float] = []
        total = 0.0
        events: list[int] = []
        for k in range(args.calls):
            call = await new_call(k, 0.0)
            r = await sequential(call, 0, args.turns)
            first_cpu.append(r["cpu_ms"][0])
            cpu += r["cpu_ms"][1:]
            wall += r["wall_ms"][1:]
            total += r["total_cpu_ms"]
            events.append(call.events())
        return {"cpu_ms": cpu, "wall_ms": wall, "first_turn_cpu_ms": first_cpu,
                "total_cpu_ms_per_turn": total / max(1, args.calls * args.turns),
                "events": events, "calls": args.calls, "turns": args.turns}
    if args.mode == "growth":
        windows = sorted(int(w) for w in args.windows.split(","))
        return await growth(new_call, windows, args.half_width, args.pause_turns)
    # capacity: memory of open calls first, then Poisson load over the same calls
    delay = args.model_ms / 1000
    calls, mem = await memory(new_call, args.calls, args.min_events, args.traced_calls,
                              args.traced_more_turns)
    for c in calls:
        c.set_model_delay(delay)
    cap = await capacity(calls, start_rate=args.start_rate, factor=args.factor,
                         step_s=args.step_s, warm_s=args.warm_s, limit_ms=args.limit_ms,
                         max_rate=args.max_rate, refine=args.refine,
                         first_turn=mem["turns_per_call"] + 1, min_samples=args.min_samples)
    return {"memory": mem, "capacity": cap, "model_ms": args.model_ms}


def main(engine: str, load: Callable[[], tuple[float, NewCall]]) -> None:
    """The drivers' shared command line; prints one JSON object on stdout.

    ``load`` imports the engine (returning how long the import took) and loads the playbook.
    """
    import argparse
    import json
    import sys

    parser = argparse.ArgumentParser(description=f"benchmark driver: {engine}")
    parser.add_argument("mode", nargs="?", default="turns", choices=["turns", "growth", "capacity"])
    parser.add_argument("--calls", type=int, default=1)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--windows", default="10,100,1000")
    parser.add_argument("--half-width", type=int, default=10)
    parser.add_argument("--pause-turns", type=int, default=50)
    parser.add_argument("--min-events", type=int, default=30)
    parser.add_argument("--traced-calls", type=int, default=20)
    parser.add_argument("--traced-more-turns", type=int, default=20)
    parser.add_argument("--model-ms", type=float, default=20.0)
    parser.add_argument("--start-rate", type=float, default=50.0)
    parser.add_argument("--factor", type=float, default=1.6)
    parser.add_argument("--step-s", type=float, default=2.0)
    parser.add_argument("--warm-s", type=float, default=0.3)
    parser.add_argument("--limit-ms", type=float, default=20.0)
    parser.add_argument("--max-rate", type=float, default=20000.0)
    parser.add_argument("--refine", type=int, default=2)
    parser.add_argument("--min-samples", type=int, default=150)
    args = parser.parse_args()
    import_s, new_call = load()
    # What a production worker does after its prewarm (worker.py): what is loaded lives as long
    # as the process, so it leaves the collector's generations. Applied to both engines alike.
    gc.collect()
    gc.freeze()
    out = {"engine": engine, "python": sys.version.split()[0], "mode": args.mode,
           "import_s": import_s}
    out.update(asyncio.run(_drive(args, new_call)))
    out["max_rss_kb"] = peak_rss_kb()
    print(json.dumps(out))
