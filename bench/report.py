"""Render ``bench/results.json`` as the Markdown results section of ``BENCHMARKS.md``.

    .venv/bin/python bench/report.py            # print the section
    .venv/bin/python bench/report.py --write    # replace it in BENCHMARKS.md

The numbers in BENCHMARKS.md are copied from a real run by this script, never typed by hand;
the section sits between ``<!-- results:start -->`` and ``<!-- results:end -->``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
START, END = "<!-- results:start -->", "<!-- results:end -->"


def _num(v: Any, unit: str = "") -> str:
    if v is None:
        return "—"
    if not isinstance(v, float):
        return f"{v} {unit}".strip()
    text = f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    return f"{text} {unit}".strip()


def _noise(n: dict[str, float] | None, unit: str) -> str:
    if not n:
        return ""
    return f"{_num(n['min'])} / {_num(n['median'])} / {_num(n['max'])} {unit}".strip()


def render(results: dict[str, Any]) -> str:
    meta = results["meta"]
    m = meta["machine"]
    lines = [
        START,
        f"Run: {meta['started']}, {meta['mode']} mode, {meta['duration_s']:.0f} s, commit "
        f"`{meta.get('commit')}`; {m['cpu']}, {m['cores']} cores, Python {m['python']}; "
        f"load average {m['loadavg_start'][0]:.1f} at start, {m['loadavg_end'][0]:.1f} at end "
        "(the machine is shared). superdialog: "
        + (meta["superdialog"]["skipped_reason"] or "0.3.0 in its own Python 3.12 venv") + ".",
        "",
        "| benchmark | figure | value | baseline (same run) | ratio | target | met | noise min / median / max |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for b in results["benchmarks"].values():
        if not b["figures"]:
            lines.append(f"| {b['title']} | **{b['status']}**: {b['reason']} | | | | | | |")
            continue
        for i, f in enumerate(b["figures"]):
            base = _num(f["baseline"], f["unit"])
            if f["baseline"] is not None and f["baseline_name"]:
                base += f" ({f['baseline_name']})"
            met = {True: "**met**", False: "**not met**", None: "—"}[f["met"]]
            name = f["name"] + (f"<br>*{f['note']}*" if f.get("note") else "")
            noise_unit = f.get("noise_unit") or f["unit"]
            lines.append(
                f"| {b['title'] if i == 0 else ''} | {name} | {_num(f['value'], f['unit'])} | "
                f"{base} | {_num(f['ratio'], 'x') if f['ratio'] is not None else '—'} | "
                f"{f['target'] or '—'} | {met} | {_noise(f['noise'], noise_unit)} |")
        if b["status"] != "ok":
            lines.append(f"| | *{b['status']}: {b['reason']}* | | | | | | |")
    lines.append(END)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=str(BENCH / "results.json"))
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md in place")
    args = parser.parse_args()
    section = render(json.loads(Path(args.results).read_text()))
    if not args.write:
        print(section)
        return
    doc = BENCH.parent / "BENCHMARKS.md"
    text = doc.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{doc} has no {START} ... {END} section")
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    doc.write_text(head + section + tail)
    print(f"updated {doc}")


if __name__ == "__main__":
    main()
