"""The benchmarks cannot rot: ``bench/run.py --quick`` runs and writes well-formed results.

Nothing here is timed (the machine is shared and noisy); the test checks that every benchmark
ran, that every figure is a number with its same-run baseline and ratio where it has one, and
that every target carries a met flag or says why it could not be judged. The superdialog venv is
pointed at a path that does not exist, proving the quick mode needs neither it nor the network.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPECTED = {"engine_overhead", "growth", "ttft", "capacity_memory", "startup", "flow_load"}


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def test_quick_bench_writes_wellformed_results(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--quick", "--out", str(out),
         "--superdialog-venv", str(tmp_path / "no-such-venv")],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(out.read_text())

    meta = results["meta"]
    assert meta["mode"] == "quick"
    assert meta["machine"]["cores"] >= 1
    # superdialog was not available: said so, not skipped silently
    assert "no superdialog venv" in meta["superdialog"]["skipped_reason"]

    benchmarks = results["benchmarks"]
    assert set(benchmarks) == EXPECTED
    for key, bench in benchmarks.items():
        assert bench["status"] in ("ok", "partial"), f"{key}: {bench['status']}: {bench['reason']}"
        if bench["status"] == "partial":
            assert bench["reason"], key
        assert bench["figures"], key
        for fig in bench["figures"]:
            where = f"{key}: {fig['name']}"
            assert fig["unit"], where
            if fig["value"] is None:
                assert fig["note"], f"{where}: no value and no reason"
                continue
            assert _number(fig["value"]), where
            if fig["baseline"] is not None:
                assert _number(fig["baseline"]), where
                assert _number(fig["ratio"]), where
            if fig["target"]:
                assert fig["met"] in (True, False) or fig["note"], f"{where}: target not judged"
            if fig["noise"] is not None:
                n = fig["noise"]
                assert n["min"] <= n["median"] <= n["max"], where
                assert fig["noise_unit"], where

    # the figures that need no superdialog are all judged, with a same-run baseline
    judged = {f["name"]: f for b in benchmarks.values() for f in b["figures"]}
    for name in ("TTFT soft gate, p50", "TTFT soft gate + never_say, p95",
                 "ours CPU/turn at turn 1000", "import superdialog_livekit + DialogMachineLLM"):
        assert judged[name]["met"] in (True, False), name
        assert _number(judged[name]["ratio"]), name
    overhead = judged["CPU per turn, median"]
    assert _number(overhead["value"]) and overhead["met"] is None and overhead["note"]


def test_model_time_is_the_union_of_overlapping_model_calls() -> None:
    """Engine overhead = turn wall time minus model time; overlapping calls count once."""
    sys.path.insert(0, str(ROOT / "bench" / "drivers"))
    try:
        from harness import ModelTimer, percentile
    finally:
        sys.path.remove(str(ROOT / "bench" / "drivers"))
    timer = ModelTimer()
    # Director and Talker called together (soft gate), then a follow-through after both
    timer.intervals[:] = [(0.0, 0.020), (0.001, 0.021), (0.030, 0.050)]
    assert math.isclose(timer.take(), 0.041)
    assert timer.intervals == []
    timer.intervals[:] = [(0.0, 0.010), (0.002, 0.004)]  # one inside the other
    assert math.isclose(timer.take(), 0.010)
    assert percentile([5.0, 1.0, 3.0], 50) == 3.0
    assert math.isnan(percentile([], 95))
