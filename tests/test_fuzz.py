"""The attacks of issue 14, kept: fuzzed verdicts, expressions, tool URLs and log files.

Bounded (a fixed number of examples each, no deadline) so the file runs in a few seconds; the
properties are the ones that held or were fixed: parsing never raises anything but its own
error and always yields loggable data, expressions never raise at evaluation, a URL value
never changes the scheme, host, port or path shape, and a damaged log is either read, named
as corrupt with a valid prefix, or repaired to a prefix of what was written.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from superdialog_core import events as ev
from superdialog_core.lang.expr import ExprError, compile_expr, evaluate
from superdialog_core.lang.templates import TemplateRefusal, compile_tool_url
from superdialog_core.log.eventlog import EventLog, LogCorruptError
from superdialog_core.log.stores import JsonlStore
from superdialog_core.roles.verdict import VerdictError, parse_verdict

FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
# Text with the characters that matter to a JSON scanner, surrogates and escapes included.
scanner_text = st.lists(
    st.sampled_from([*list('{}[]":,\\ \nabc1-`'), "�", "\\ud800", "```json", "é", "1" * 70]),
    max_size=300,
).map("".join)


def loggable(value: Any) -> None:
    """The value can be stored in an event (the log must always encode)."""
    msgspec.json.encode(ev.Verdict(verdict=value))


@FUZZ
@given(scanner_text)
def test_any_answer_parses_or_is_a_verdict_error(text: str) -> None:
    try:
        verdict = parse_verdict(text)
    except VerdictError:
        return
    assert isinstance(verdict, dict)
    loggable(verdict)


@FUZZ
@given(st.dictionaries(st.sampled_from(["slots", "spans", "note", "advance", "x"]), json_values,
                       max_size=4), st.text(max_size=40), st.text(max_size=40))
def test_an_object_in_prose_is_found(obj: dict[str, Any], before: str, after: str) -> None:
    text = before.replace("{", "(") + json.dumps(obj) + after.replace("{", "(")
    verdict = parse_verdict(text)
    for key, value in obj.items():
        if value not in (None, "", [], {}) and not (isinstance(value, str) and not value.strip()):
            assert verdict[key] == value


@FUZZ
@given(json_values)
def test_any_adapter_dict_parses_or_is_a_verdict_error(value: Any) -> None:
    try:
        verdict = parse_verdict({"slots": {"x": value}, "note": value})
    except VerdictError:
        return
    loggable(verdict)


expression_text = st.lists(
    st.sampled_from(["slots.a", "slots.b", "results.r.ok", "results.r.data.items", "len(", "(", ")",
                     " and ", " or ", "not ", " == ", " < ", " in ", "[0]", "['k']", "1", "'x'",
                     "None", "unique(", "first(", "pluck(", ", ", "__class__", "lambda", "**",
                     "[", "]", "max(", "any(", "calls.t", "env.E", "9" * 30]),
    max_size=12,
).map("".join)
scopes = st.fixed_dictionaries({
    "slots": st.dictionaries(st.sampled_from(["a", "b"]), json_values, max_size=2),
    "results": st.fixed_dictionaries({"r": st.fixed_dictionaries(
        {"ok": st.booleans(), "data": json_values})}),
    "env": st.just({"E": "v"}), "calls": st.just({"t": 1}),
})


@FUZZ
@given(expression_text, scopes)
def test_expressions_compile_or_refuse_and_never_raise_when_evaluated(text: str, scope: Any) -> None:
    try:
        compiled = compile_expr(text)
    except ExprError:
        return
    errors: list[str] = []
    compiled.evaluate(scope, on_error=errors.append)
    evaluate(compiled, scope)


url_values = st.lists(st.sampled_from([*list("/?#&=.%@:[] \\ab1"), "..", "é", "�"]),
                      max_size=12).map("".join) | st.integers()


@FUZZ
@given(url_values, url_values)
def test_a_value_never_changes_the_url_s_authority_or_path_shape(who: Any, q: Any) -> None:
    template = compile_tool_url("https://api.example.com:8443/v1/{{ slots.who }}/x?q={{ slots.q }}")
    try:
        url = template.render({"slots": {"who": who, "q": q}})
    except TemplateRefusal:
        assert str(who) in (".", "..") or str(q) in (".", "..")
        return
    parts = urlsplit(url)
    assert (parts.scheme, parts.hostname, parts.port) == ("https", "api.example.com", 8443)
    segments = parts.path.split("/")
    assert len(segments) == 4 and segments[:2] == ["", "v1"] and segments[3] == "x"
    assert unquote(segments[2]) == str(who).replace("\ud800", "\ufffd")
    assert parts.fragment == "" and "&" not in parts.query
    assert unquote(parts.query.removeprefix("q=")) == str(q).replace("\ud800", "\ufffd")


def _log() -> EventLog:
    log = EventLog(clock=lambda: 1.0)
    log.append(ev.SessionStart(session_id="s", playbook_hash="h", anchor="2026-11-30T10:00:00+00:00"))
    for i in range(6):
        log.append(ev.Utterance(role="user", text=f"turn {i} é"))
        log.append(ev.SlotWrite(key="n", value=i, status="accepted", by="director"))
    return log


@FUZZ
@given(st.data())
def test_a_damaged_log_file_is_read_named_or_repaired_to_a_prefix(tmp_path_factory: Any, data: Any) -> None:
    directory: Path = tmp_path_factory.mktemp("logs")
    log = _log()
    store = JsonlStore(directory)
    asyncio.run(store.append("s", list(log)))
    raw = bytearray(store.path("s").read_bytes())
    action = data.draw(st.sampled_from(["cut", "flip", "insert"]))
    at = data.draw(st.integers(0, len(raw) - 1))
    if action == "cut":
        raw = raw[:at]
    elif action == "flip":
        raw[at] = data.draw(st.integers(0, 255))
    else:
        raw[at:at] = data.draw(st.binary(min_size=1, max_size=8))
    store.path("s").write_bytes(bytes(raw))
    original = list(log)

    async def check() -> None:
        try:
            loaded = await store.load("s")
        except LogCorruptError as exc:
            assert list(exc.prefix) == original[: len(exc.prefix)]
            report = await store.repair("s")
            assert report is not None and report.repaired
            assert list(report.log) == original[: report.log.version]
            again = await store.load("s")
            assert again is not None and list(again) == list(report.log)
            return
        assert loaded is not None
        # A change that still reads (a flipped byte inside a line without consequence is not
        # possible with checksums): only a cut at a line boundary or blank insertions.
        assert list(loaded) == original[: loaded.version]

    asyncio.run(check())


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.data())
def test_a_damaged_sqlite_file_is_named_never_a_raw_database_error(
    tmp_path_factory: Any, data: Any
) -> None:
    import sqlite3

    from superdialog_core.log.sqlite_store import SQLiteStore

    path: Path = tmp_path_factory.mktemp("db") / "logs.db"
    store = SQLiteStore(path)
    sessions = [f"s{i}" for i in range(8)]

    async def fill() -> None:
        for sid in sessions:
            await store.append(sid, list(_log()))

    asyncio.run(fill())
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    raw = bytearray(path.read_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at : at + 64] = data.draw(st.binary(min_size=64, max_size=64))
    path.write_bytes(bytes(raw))
    original = list(_log())

    async def check() -> None:
        damaged = SQLiteStore(path)
        for sid in sessions:
            try:
                loaded = await damaged.load(sid)
            except LogCorruptError as exc:
                assert str(path) in str(exc) and sid in str(exc)
                report = await damaged.repair(sid)
                assert report is not None
                assert list(report.log) == original[: report.log.version]
                continue
            except sqlite3.DatabaseError as exc:  # pragma: no cover - the failure this guards
                raise AssertionError(f"raw DatabaseError for {sid}: {exc}") from exc
            if loaded is not None:
                assert list(loaded) == original[: loaded.version]
        damaged.close()

    asyncio.run(check())
