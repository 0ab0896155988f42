"""Time to first token through DialogMachineLLM vs the same Talker in a plain LiveKit Agent.

    python bench/ttft.py [--quick] [--json]

One run, inside real ``AgentSession``s in text mode, with a Talker whose first token comes
after 150 ms: the plain ``Agent`` baseline, ``DialogMachineLLM`` at a soft gate without and
with ``never_say``, and at a hard gate with a 300 ms Director. Conditions take turns so the
shared machine's fast and slow phases fall on all of them; the differences are paired (the
same round under both conditions). The measuring itself lives in
``bench/drivers/ttft_driver.py``, which ``bench/run.py`` also uses; this prints the figures
SPEC §14 sets targets for: ≤ 1 ms over plain at p50, ≤ 2 ms at p95, with or without
``never_say``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

DRIVER = Path(__file__).resolve().parent / "drivers" / "ttft_driver.py"
TARGETS = {"p50": 1.0, "p95": 2.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 rounds instead of 40 (smoke test)")
    parser.add_argument("--json", action="store_true", help="print the driver's JSON as is")
    args = parser.parse_args()
    rounds = "8" if args.quick else "40"
    proc = subprocess.run([sys.executable, str(DRIVER), "--rounds", rounds],
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        return proc.returncode
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    if args.json:
        print(json.dumps(results))
        return 0
    conditions = results["conditions"]
    plain = conditions["plain"]
    print(f"time to first token, Talker first token after 150 ms, {rounds} rounds per condition")
    print(f"  plain LiveKit Agent:        p50 {plain['p50']:7.2f} ms   p95 {plain['p95']:7.2f} ms")
    for name, label in (("ours", "DialogMachineLLM, soft gate"),
                        ("ours_never_say", "  ... with never_say"),
                        ("ours_hard_gate", "hard gate, 300 ms Director")):
        c = conditions.get(name)
        if c is None:
            continue
        line = f"  {label:<27} p50 {c['p50']:7.2f} ms   p95 {c['p95']:7.2f} ms"
        if name != "ours_hard_gate":
            d50, d95 = c["paired_diff_p50"], c["paired_diff_p95"]
            met = d50 <= TARGETS["p50"] and d95 <= TARGETS["p95"]
            line += (f"   over plain: p50 {d50:+.2f} ms, p95 {d95:+.2f} ms "
                     f"(target ≤ +1 / +2 ms: {'met' if met else 'NOT met'})")
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
