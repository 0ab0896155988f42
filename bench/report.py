"""Render ``bench/results.json`` as the Markdown results section of ``BENCHMARKS.md``.

    .venv/bin/python bench/report.py            # print the section
    .venv/bin/python bench/report.py --write    # replace it in BENCHMARKS.md
    .venv/bin/python bench/report.py --across a.json b.json c.json [--write]
                                                # run-to-run noise of the headline figures

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
NOISE_START, NOISE_END = "<!-- noise:start -->", "<!-- noise:end -->"


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


def render_across(runs: list[dict[str, Any]], names: list[str]) -> str:
    """min / median / max of each figure's value and ratio over several full runs."""
    import statistics

    def mmm(xs: list[float], unit: str) -> str:
        if not xs:
            return "—"
        return f"{_num(min(xs))} / {_num(statistics.median(xs))} / {_num(max(xs))} {unit}".strip()

    lines = [
        NOISE_START,
        f"{len(runs)} full runs: " + ", ".join(
            f"{r['meta']['started']} (commit `{r['meta'].get('commit')}`)" for r in runs) + ".",
        "",
        "| figure | value min / median / max | value − baseline min / median / max "
        "| ratio min / median / max | met in |",
        "|---|---|---|---|---|",
    ]
    figures: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        for b in run["benchmarks"].values():
            for f in b["figures"]:
                figures.setdefault(f["name"], []).append(f)
    for name in names:
        fs = figures.get(name, [])
        if not fs:
            continue
        values = [f["value"] for f in fs if isinstance(f["value"], (int, float))]
        ratios = [f["ratio"] for f in fs if isinstance(f["ratio"], (int, float))]
        deltas = [f["value"] - f["baseline"] for f in fs
                  if isinstance(f["value"], (int, float)) and isinstance(f["baseline"], (int, float))]
        judged = [f["met"] for f in fs if f["met"] is not None]
        met = f"{sum(judged)} of {len(judged)}" if judged else "—"
        unit = fs[0]["unit"]
        lines.append(f"| {name} | {mmm(values, unit)} | {mmm(deltas, unit)} | "
                     f"{mmm(ratios, 'x')} | {met} |")
    lines.append(NOISE_END)
    return "\n".join(lines)


def _replace(doc: Path, start: str, end: str, section: str) -> None:
    text = doc.read_text()
    if start not in text or end not in text:
        raise SystemExit(f"{doc} has no {start} ... {end} section")
    head, rest = text.split(start, 1)
    doc.write_text(head + section + rest.split(end, 1)[1])
    print(f"updated {doc}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=str(BENCH / "results.json"))
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md in place")
    parser.add_argument("--across", nargs="+", metavar="RESULTS",
                        help="several full runs' results.json: their spread per figure")
    args = parser.parse_args()
    doc = BENCH.parent / "BENCHMARKS.md"
    if args.across:
        runs = [json.loads(Path(p).read_text()) for p in args.across]
        names = [f["name"] for b in runs[-1]["benchmarks"].values() for f in b["figures"]
                 if f["target"] or f["name"].startswith(("saturation", "TTFT hard"))]
        section = render_across(runs, names)
        if args.write:
            _replace(doc, NOISE_START, NOISE_END, section)
        else:
            print(section)
        return
    section = render(json.loads(Path(args.results).read_text()))
    if args.write:
        _replace(doc, START, END, section)
    else:
        print(section)


if __name__ == "__main__":
    main()
