"""Director quality on a local model: right slots, invented values, schema validity, prompt size.

    .venv/bin/python bench/director_quality.py --model local/qwen2.5-coder-1.5b --superdialog
    .venv/bin/python bench/director_quality.py --model local/smollm2-135m --limit 5

The cases (``bench/quality/cases.yaml``, written for this project) each start at a checkpoint
of one of two benchmark playbooks (``bench/quality/dental.yaml``, ``claim.yaml``) with a
natural first caller turn and the assistant's reply, sometimes values already known and a
read-back, then one caller line. Our engine's real Director path runs on each:
``build_director_request`` → the local llama.cpp server (started by the plugin's
``local_server``, asked exactly as the plugin's adapter asks a ``local/...`` model: JSON text
under ``response_format`` with the llama-safe verdict schema, temperature 0, the same token and
string bounds) → ``parse_verdict`` → ``apply_verdict`` on a real log and state. With
``--superdialog`` superdialog 0.3.0's Director runs on the same cases, the superdialog-format
copies of the playbooks (``*.superdialog.yaml``) and the same model (its own server, so each
engine keeps its prompt prefix cached), in the throwaway venv ``bench/run.py`` uses.

Printed per engine: slot accuracy (expected values left right, phones compared by digits,
names without case), invented values (a slot of the checkpoint that changed without the case
expecting it), fully right cases, schema-valid verdicts, median Director latency and median
prompt tokens per turn; then ours against superdialog's as differences and ratios.
One model thread, greedy decoding: the machine is shared, and the numbers repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import yaml

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
QUALITY = BENCH / "quality"
PLAYBOOKS = {"dental": "dental.yaml", "claim": "claim.yaml"}
DEFAULT_AT = {"dental": "dental.booking", "claim": "claim.policy"}
SD_VENV = BENCH / ".venvs" / "superdialog"
SD_DRIVER = BENCH / "drivers" / "quality_superdialog_driver.py"

sys.path.insert(0, str(ROOT))


def log(msg: str) -> None:
    print(f"[quality {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- cases ---------------------------------------------------------------------------------


def load_cases(limit: int | None, only: list[str] | None) -> dict[str, Any]:
    doc = yaml.safe_load((QUALITY / "cases.yaml").read_text())
    cases = []
    for raw in doc["cases"]:
        if only and raw["id"] not in only:
            continue
        steps: list[list[Any]] = [["say", role, text] for role, text in doc["openers"][raw["opener"]]]
        for key, (value, status) in (raw.get("known") or {}).items():
            steps.append(["write", key, value, status])
        steps += [["say", role, text] for role, text in raw.get("then") or []]
        cases.append({
            "id": raw["id"], "playbook": raw["playbook"],
            "at": raw.get("at", DEFAULT_AT[raw["playbook"]]),
            "steps": steps, "say": raw["say"], "expect": raw.get("expect") or {},
            "known": {k: v[0] for k, v in (raw.get("known") or {}).items()},
        })
    if limit:
        cases = cases[:limit]
    return {"anchor": doc["anchor"], "timezone": doc["timezone"], "cases": cases}


# --- scoring -------------------------------------------------------------------------------


def _norm(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "phone":
        return "".join(ch for ch in str(value) if ch.isdigit()).lstrip("0")
    if kind in ("str", "email", "enum"):
        return " ".join(str(value).casefold().split())
    return str(value)


@dataclass
class Score:
    """One engine's figures over the cases it ran."""

    expected: int = 0
    right: int = 0
    invented: int = 0
    lost: int = 0
    cases: int = 0
    fully_right: int = 0
    valid: int = 0
    latency_ms: list[float] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    misses: list[str] = field(default_factory=list)
    # anchor refusals by slot type: [inventions stopped, correct values lost]
    anchor: dict[str, list[int]] = field(default_factory=dict)

    def add(self, case: dict[str, Any], kinds: dict[str, str], final: dict[str, Any],
            *, valid: bool, ms: float | None, tokens: int | None, phone_digits: bool) -> None:
        self.cases += 1
        self.valid += int(valid)
        if ms is not None:
            self.latency_ms.append(ms)
        if tokens is not None:
            self.prompt_tokens.append(tokens)
        ok = True
        for key, want in case["expect"].items():
            kind = kinds[key]
            # superdialog has no phone type: its phone slot is text, compared by digits too
            got = final.get(key)
            hit = _norm(kind, got) == _norm(kind, want)
            if kind == "phone" and phone_digits and got is not None and want is not None:
                digits = _norm("phone", got)
                hit = digits in (_norm("phone", want), _norm("phone", want)[2:])  # +44… or 0…
            self.expected += 1
            self.right += int(hit)
            if not hit:
                ok = False
                self.misses.append(f"{case['id']}: {key}={got!r} (want {want!r})")
        for key in kinds:
            if key in case["expect"]:
                continue
            before, after = case["known"].get(key), final.get(key)
            if _norm(kinds[key], before) == _norm(kinds[key], after):
                continue
            ok = False
            if after is None:
                self.lost += 1
                self.misses.append(f"{case['id']}: {key} lost (was {before!r})")
            else:
                self.invented += 1
                self.misses.append(f"{case['id']}: {key}={after!r} invented")
        self.fully_right += int(ok)

    def row(self) -> dict[str, Any]:
        return {
            "slot_accuracy": self.right / self.expected if self.expected else None,
            "right": self.right, "expected": self.expected,
            "invented": self.invented, "lost": self.lost,
            "fully_right": self.fully_right, "cases": self.cases,
            "schema_valid": self.valid,
            "median_latency_ms": statistics.median(self.latency_ms) if self.latency_ms else None,
            "median_prompt_tokens": (statistics.median(self.prompt_tokens)
                                     if self.prompt_tokens else None),
        }


def slot_kinds(playbook: Any, at: str) -> dict[str, str]:
    """The checkpoint's slots and their types: the scope a case is scored in."""
    cp = playbook.checkpoint(at)
    return {k: s.type for k, s in cp.slots.items()}


# --- our engine ----------------------------------------------------------------------------


def _model_name(uri: str) -> str:
    if not uri.startswith("local/"):
        raise SystemExit(f"--model must be a local/... URI (a llama.cpp model), got {uri!r}")
    return uri.removeprefix("local/")


def start_server(uri: str, instance: str) -> Any:
    from superdialog_livekit.local import local_server

    return local_server(_model_name(uri), instance=instance)


def run_ours(job: dict[str, Any], server: Any,
             replay: dict[str, dict[str, Any]] | None = None) -> tuple[Score, list[dict[str, Any]]]:
    """Our Director on every case; with ``replay`` (rows of an earlier ``--out``), the model's
    answers are taken from there and only the engine's rules run (greedy decoding gives the
    same answers for the same prompt, so this re-scores a rule change without the model)."""
    from datetime import datetime

    from superdialog_core import events as ev
    from superdialog_core.format.lookups import language_of
    from superdialog_core.log.eventlog import EventLog
    from superdialog_core.log.state import ConversationState
    from superdialog_core.playbook import Playbook
    from superdialog_core.roles.director import build_director_request
    from superdialog_core.roles.verdict import VerdictError, apply_verdict, parse_verdict
    from superdialog_core.values.coerce import ValueContext

    from superdialog_livekit.llama_schema import llama_safe_schema
    from superdialog_livekit.uris import LOCAL_DIRECTOR_MAX_TOKENS, LOCAL_MAX_STRING

    playbooks = {name: Playbook.load(QUALITY / path) for name, path in PLAYBOOKS.items()}
    anchor = datetime.fromisoformat(job["anchor"])
    http = httpx.Client(base_url=server.base_url, timeout=600.0, trust_env=False) if server else None
    score = Score()
    rows = []
    for case in job["cases"]:
        playbook = playbooks[case["playbook"]]
        ctx = ValueContext(now=anchor, timezone=job["timezone"],
                           phone_region=playbook.policies.phone_region,
                           language=language_of(playbook))
        elog = EventLog()
        state = ConversationState(playbook)

        def emit(event: Any, elog: Any = elog, state: Any = state) -> Any:
            elog.append(event)
            state.apply(event)
            return event

        emit(ev.SessionStart(session_id=case["id"], playbook_hash="bench", anchor=job["anchor"],
                             timezone=job["timezone"]))
        emit(ev.Advance(to=case["at"], rule_id="init", by="init"))
        for step in case["steps"]:
            if step[0] == "say":
                _, role, text = step
                if role == "caller":
                    emit(ev.Utterance(role="user", text=text))
                else:
                    emit(ev.Utterance(role="assistant", text=text, kind="talker",
                                      spoke_from_version=state.version))
            else:
                _, key, value, status = step
                emit(ev.SlotWrite(key=key, value=value, status=status, by="director"))
        user_version = emit(ev.Utterance(role="user", text=case["say"])).version
        request = build_director_request(state, playbook, user_text=case["say"],
                                         user_version=user_version)
        body = {
            "model": server.alias if server else "replay", "messages": request.messages,
            "temperature": 0.0,
            "max_tokens": LOCAL_DIRECTOR_MAX_TOKENS,
            "response_format": {"type": "json_object", "schema": llama_safe_schema(
                request.schema, max_length=LOCAL_MAX_STRING)},
        }
        if replay is not None:
            old = replay[case["id"]]
            text, ms, tokens = old["raw"], old["ms"], old["prompt_tokens"]
        else:
            assert http is not None
            started = time.perf_counter()
            reply = http.post("/chat/completions", json=body)
            ms = (time.perf_counter() - started) * 1000.0
            reply.raise_for_status()
            data = reply.json()
            text = data["choices"][0]["message"].get("content") or ""
            tokens = data.get("usage", {}).get("prompt_tokens")
        try:
            jsonschema.validate(json.loads(text), request.schema)
            valid = True
        except (ValueError, jsonschema.ValidationError):
            valid = False
        events: list[str] = []
        kinds = slot_kinds(playbook, case["at"])
        try:
            verdict = parse_verdict(text)
        except VerdictError as exc:
            events.append(f"unparsed: {exc.detail}")
        else:
            before = elog.version if hasattr(elog, "version") else None
            apply_verdict(verdict, state=state, playbook=playbook, value_ctx=ctx,
                          user_text=case["say"], user_version=user_version, emit=emit)
            for event in elog:
                if before is not None and event.version <= before:
                    continue
                if isinstance(event, (ev.SlotRefused, ev.Degraded)):
                    events.append(f"{type(event).__name__}: {getattr(event, 'detail', None) or event.message}")
                if isinstance(event, ev.SlotRefused) and "not in the caller's words" in event.message:
                    _count_anchor(score, case, kinds, event.key, event.value, ctx)
        final = {k: s.value for k, s in state.slots.items()}
        score.add(case, kinds, final, valid=valid, ms=ms,
                  tokens=tokens, phone_digits=False)
        rows.append({"id": case["id"], "raw": text, "slots": final, "events": events,
                     "ms": round(ms), "prompt_tokens": tokens, "valid": valid})
        log(f"ours {case['id']}: {ms / 1000:.1f} s, {tokens} prompt tokens, {final}")
    if http is not None:
        http.close()
    return score, rows


def _count_anchor(score: Score, case: dict[str, Any], kinds: dict[str, str], key: str,
                  raw: Any, ctx: Any) -> None:
    """An enforce refusal: an invention stopped, or a correct value lost (the case expected it)."""
    from superdialog_core.playbook import SlotSpec
    from superdialog_core.values.coerce import ValueRefused, coerce

    kind = kinds.get(key, "str")
    try:
        value = coerce(key, SlotSpec(type=kind), raw, ctx)  # type: ignore[arg-type]
    except ValueRefused:
        value = raw
    want = case["expect"].get(key, case["known"].get(key))
    lost = want is not None and _norm(kind, value) == _norm(kind, want)
    score.anchor.setdefault(kind, [0, 0])[1 if lost else 0] += 1


# --- superdialog ---------------------------------------------------------------------------


def run_superdialog(job: dict[str, Any], server: Any,
                    venv: Path = SD_VENV) -> tuple[Score, list[dict[str, Any]]]:
    from superdialog_core.playbook import Playbook

    from superdialog_livekit.uris import LOCAL_DIRECTOR_MAX_TOKENS

    python = venv / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"superdialog's venv is missing ({python}); run bench/run.py once to "
                         "create it, or pass --superdialog-venv")
    payload = {
        "base_url": server.base_url, "model": server.alias, "max_tokens": LOCAL_DIRECTOR_MAX_TOKENS,
        "anchor": job["anchor"], "timezone": job["timezone"], "cases": job["cases"],
        "playbooks": {name: str(QUALITY / path.replace(".yaml", ".superdialog.yaml"))
                      for name, path in PLAYBOOKS.items()},
        "progress": os.environ.get("QUALITY_SD_PROGRESS"),  # a JSONL file, one case a line
    }
    proc = subprocess.run([str(python), str(SD_DRIVER)], input=json.dumps(payload), text=True,
                          capture_output=True, cwd=ROOT, timeout=3600,
                          env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    if proc.returncode != 0:
        raise SystemExit(f"superdialog driver failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    ours = {name: Playbook.load(QUALITY / path) for name, path in PLAYBOOKS.items()}
    score = Score()
    by_id = {c["id"]: c for c in job["cases"]}
    for row in result["cases"]:
        case = by_id[row["id"]]
        raw = row["raw"]
        try:
            valid = isinstance(json.loads(raw), dict) if raw is not None else False
        except ValueError:
            valid = False
        score.add(case, slot_kinds(ours[case["playbook"]], case["at"]), row["slots"],
                  valid=valid, ms=row["ms"], tokens=row["prompt_tokens"], phone_digits=True)
    return score, result["cases"]


# --- report --------------------------------------------------------------------------------


def _fmt(row: dict[str, Any]) -> list[str]:
    acc = row["slot_accuracy"]
    lat = row["median_latency_ms"]
    tok = row["median_prompt_tokens"]
    return [
        f"{row['right']}/{row['expected']} ({acc:.0%})" if acc is not None else "-",
        str(row["invented"]), str(row["lost"]),
        f"{row['fully_right']}/{row['cases']}",
        f"{row['schema_valid']}/{row['cases']}",
        f"{lat / 1000:.2f} s" if lat is not None else "-",
        f"{tok:.0f}" if tok is not None else "-",
    ]


def print_table(model: str, rows: dict[str, dict[str, Any]]) -> str:
    head = ["engine", "slot accuracy", "invented", "lost", "fully right", "schema-valid",
            "median Director latency", "median prompt tokens/turn"]
    lines = [f"model: {model}", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in rows.items():
        lines.append("| " + " | ".join([name, *_fmt(row)]) + " |")
    if "ours" in rows and "superdialog 0.3.0" in rows:
        a, b = rows["ours"], rows["superdialog 0.3.0"]
        if a["slot_accuracy"] is not None and b["slot_accuracy"] is not None:
            lines.append(f"slot accuracy: ours - superdialog = "
                         f"{(a['slot_accuracy'] - b['slot_accuracy']) * 100:+.1f} points")
        if a["median_prompt_tokens"] and b["median_prompt_tokens"]:
            lines.append(f"prompt tokens per turn: ours / superdialog = "
                         f"{a['median_prompt_tokens'] / b['median_prompt_tokens']:.2f}")
        if a["median_latency_ms"] and b["median_latency_ms"]:
            lines.append(f"Director latency: ours / superdialog = "
                         f"{a['median_latency_ms'] / b['median_latency_ms']:.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="local/smollm2-135m",
                        help="local/<name or .gguf path> (default: local/smollm2-135m)")
    parser.add_argument("--superdialog", action="store_true",
                        help="also run superdialog 0.3.0's Director on the same cases and model")
    parser.add_argument("--superdialog-venv", type=Path, default=SD_VENV,
                        help=f"venv with superdialog 0.3.0 (default {SD_VENV.relative_to(ROOT)})")
    parser.add_argument("--no-ours", action="store_true",
                        help="skip our engine (with --superdialog: superdialog's figures only)")
    parser.add_argument("--replay", type=Path, default=None,
                        help="take our model's answers from an earlier --out file (no model run)")
    parser.add_argument("--limit", type=int, default=None, help="run the first N cases only")
    parser.add_argument("--case", action="append", help="run only this case id (repeatable)")
    parser.add_argument("--out", type=Path, default=None, help="write every verdict as JSON here")
    parser.add_argument("--misses", action="store_true", help="list every wrong or invented value")
    args = parser.parse_args(argv)
    job = load_cases(args.limit, args.case)
    log(f"{len(job['cases'])} cases, model {args.model}")
    rows: dict[str, dict[str, Any]] = {}
    detail: dict[str, Any] = {}
    scores: dict[str, Score] = {}
    # One server per engine: each keeps its own prompt prefix cached.
    if args.replay is not None:
        old = json.loads(args.replay.read_text())["detail"]["ours"]
        scores["ours"], detail["ours"] = run_ours(job, None, {r["id"]: r for r in old})
    elif not args.no_ours:
        server = start_server(args.model, "quality-ours")
        scores["ours"], detail["ours"] = run_ours(job, server)
        server.stop()
    if args.superdialog:
        server = start_server(args.model, "quality-superdialog")
        scores["superdialog 0.3.0"], detail["superdialog"] = run_superdialog(
            job, server, args.superdialog_venv)
        server.stop()
    for name, score in scores.items():
        rows[name] = score.row()
    table = print_table(args.model, rows)
    print(table)
    for name, score in scores.items():
        if score.anchor:
            parts = [f"{kind}: {stopped} inventions stopped, {lost} correct values lost"
                     for kind, (stopped, lost) in sorted(score.anchor.items())]
            print(f"{name}, anchor refusals by type: " + "; ".join(parts))
    if args.misses:
        for name, score in scores.items():
            print(f"\n{name} misses:")
            for miss in score.misses:
                print("  " + miss)
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "detail": detail,
                                        "misses": {n: s.misses for n, s in scores.items()}},
                                       ensure_ascii=False, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
