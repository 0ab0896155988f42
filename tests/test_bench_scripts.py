"""The per-issue benchmark scripts run and report every figure (numbers are not judged here:
the machine is shared and noisy; BENCHMARKS.md records them)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

from tests.paths import ROOT


def run(script: str) -> dict:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--quick", "--json"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_fold_reports_apply_cost_at_three_sizes_and_bytes_per_event() -> None:
    result = run("fold.py")
    assert set(result["apply_us"]) == {"10", "1000", "10000"}
    assert all(v > 0 and math.isfinite(v) for v in result["apply_us"].values())
    assert result["bytes_per_event"] > 0 and isinstance(result["bytes_met"], bool)
    assert result["ratio_10000_vs_10"] > 0 and isinstance(result["ratio_met"], bool)


def test_turn_reports_median_p95_and_growth() -> None:
    result = run("turn.py")
    assert result["playbook"] == "dental_booking.yaml"
    assert 0 < result["cpu_ms_median"] <= result["cpu_ms_p95"]
    assert result["cpu_ms_at_turn_10"] > 0 and result["ratio_late_vs_10"] > 0
    assert isinstance(result["ratio_met"], bool)


def test_store_append_reports_p50_p95_for_redis_sqlite_and_jsonl() -> None:
    result = run("store_append.py")
    assert set(result["stores"]) == {"redis", "sqlite", "jsonl"}
    for row in result["stores"].values():
        assert 0 < row["p50_ms"] <= row["p95_ms"] and math.isfinite(row["p95_ms"])
        assert row["p50_vs_jsonl"] > 0
    assert result["stores"]["jsonl"]["p50_vs_jsonl"] == 1.0
def test_verdict_parse_reports_four_shapes_at_1kb_10kb_and_the_cap() -> None:
    result = run("verdict_parse.py")
    assert set(result) == {"prose", "braces", "nested", "fenced"}
    for times in result.values():
        assert set(times) == {"1000", "10000", "65536"}
        assert all(v > 0 and math.isfinite(v) for v in times.values())
