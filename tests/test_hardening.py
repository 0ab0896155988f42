"""Issue 14: one bad character, one long answer or one torn file never breaks a call.

One test (at least) per failure the attack found: Unicode at every boundary, tool URL
encoding, verdict parsing (cap, linear work, off the loop, deep nesting, huge ints), bounded
values, resume from any prefix, checksums and repair, caps. Work bounds are asserted as
amounts of work (characters decoded, comparisons made, loop items), never as times.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from loopback import LoopbackServer, Reply
from superdialog_core import (
    JsonlStore,
    MemoryStore,
    Playbook,
    PlaybookError,
    Runtime,
    ScriptedDirector,
    ScriptedTalker,
)
from superdialog_core import events as ev
from superdialog_core.lang.expr import evaluate
from superdialog_core.lang.templates import (
    TemplateRefusal,
    compile_speech,
    compile_tool_text,
    compile_tool_url,
)
from superdialog_core.log.eventlog import EventLog, LogCorruptError, encode_line, seal, unseal
from superdialog_core.log.sqlite_store import SQLiteStore
from superdialog_core.log.state import ConversationState
from superdialog_core.log.stores import LogStore, RepairReport
from superdialog_core.roles import verdict_parse
from superdialog_core.roles.verdict import VerdictError, VerdictTooLarge, parse_verdict
from superdialog_core.tools.ssrf import UrlRefused, vet_url
from superdialog_core.values.clean import ValueTooLarge, clean_text, clean_value

PLAYBOOK = """
journeys:
  main:
    checkpoints:
      - id: ask
        goal: Get the caller's name and party size
        slots:
          name: {type: str, required: true}
          party: {type: int}
        advance_when:
          - {id: named, when: "slots.name", judge: expr, to: main.lookup}
      - id: lookup
        goal: Look the caller up
        pipeline: find
        advance_when:
          - {id: found, when: "results.found.ok", judge: expr, to: main.done}
      - id: done
        terminal: true
        outcome: ok
        say_verbatim: "All set. Goodbye!"
tools:
  - {id: finder, type: python, store_response_as: found}
pipelines:
  - {id: find, steps: [{tool: finder}]}
"""


def playbook(text: str = PLAYBOOK) -> Playbook:
    return Playbook.from_yaml(text)


def finder(args: Any) -> dict[str, Any]:
    return {"who": "Ana"}


def runtime(director: Any, talker: Any | None = None, **kw: Any) -> Runtime:
    kw.setdefault("python_tools", {"finder": finder})
    return Runtime(kw.pop("playbook", None) or playbook(), director,
                   talker or ScriptedTalker(["Hello, who is calling?"] * 20), **kw)


def of(log: Any, kind: type[ev.Event]) -> list[Any]:
    return [e for e in log if isinstance(e, kind)]


def degraded(log: Any, prefix: str = "") -> list[str]:
    return [e.detail for e in of(log, ev.Degraded) if e.detail.startswith(prefix)]


# --- 1. valid Unicode at every boundary -----------------------------------------------------


def test_clean_text_replaces_lone_surrogates_and_joins_pairs() -> None:
    assert clean_text("plain") == ("plain", 0)
    assert clean_text("caf\u00e9") == ("caf\u00e9", 0)
    assert clean_text("a\ud800b") == ("a\ufffdb", 1)
    assert clean_text("\ud83d\ude00 \udfff") == ("\U0001f600 \ufffd", 1)


async def test_a_lone_surrogate_from_the_caller_is_replaced_logged_once_and_stored(
    tmp_path: Path,
) -> None:
    store = JsonlStore(tmp_path)
    rt = runtime(ScriptedDirector([{}, {}, {}]), store=store, session_id="call-1")
    await rt.start()
    for text in ("hello \ud800 there", "second", "third"):
        await rt.user_turn(text)
    await rt.wait_idle()
    users = [e.text for e in of(rt.log, ev.Utterance) if e.role == "user"]
    assert users == ["hello \ufffd there", "second", "third"]
    assert len(degraded(rt.log, "invalid_unicode:caller")) == 1
    stored = await store.load("call-1")
    assert stored is not None and stored.to_jsonl() == rt.log.to_jsonl()
    assert not degraded(rt.log, "UnicodeEncodeError")


async def test_a_surrogate_escape_in_the_director_answer_is_replaced_once() -> None:
    answer = 'Here: {"slots": {"name": "An\\ud800a"}, "note": null}'
    rt = runtime(ScriptedDirector([answer]))
    await rt.start()
    await rt.user_turn("it's Ana")
    await rt.wait_idle()
    assert rt.state.slots["name"].value == "An\ufffda"
    assert len(degraded(rt.log, "invalid_unicode:director")) == 1
    json.loads(rt.log.to_jsonl().splitlines()[-1])  # the log still encodes


async def test_a_surrogate_in_a_tool_response_and_in_the_talker_is_replaced_once() -> None:
    rt = runtime(ScriptedDirector([{"slots": {"name": "Ana"}}]),
                 ScriptedTalker(["Hi \udc00 there?", "Thanks.", "More?", "Ok."]),
                 python_tools={"finder": lambda args: {"who": "Zo\udcffe"}})
    await rt.start()
    await rt.user_turn("Ana")
    await rt.wait_idle()
    (result,) = [e for e in of(rt.log, ev.ToolResult) if e.tool == "finder"]
    assert result.data == {"who": "Zo\ufffde"}
    assert len(degraded(rt.log, "invalid_unicode:tool:finder")) == 1
    spoken = [e.text for e in of(rt.log, ev.Utterance) if e.role == "assistant"]
    assert spoken[0] == "Hi \ufffd there?"
    assert len(degraded(rt.log, "invalid_unicode:talker")) == 1
    rt.log.to_jsonl()


async def test_an_unserialisable_event_is_stored_as_degraded_and_persistence_goes_on(
    tmp_path: Path,
) -> None:
    store = JsonlStore(tmp_path)
    log = EventLog()
    log.append(ev.SessionStart(session_id="s", playbook_hash="h", anchor="2026-11-30T10:00:00+00:00"))
    log.append(ev.SlotWrite(key="x", value=object(), status="accepted", by="director"))
    log.append(ev.Utterance(role="user", text="after"))
    await store.append("s", list(log))
    stored = await store.load("s")
    assert stored is not None and [type(e).__name__ for e in stored] == [
        "SessionStart", "Degraded", "Utterance"]
    assert stored[1].version == 2 and stored[1].component == "log"
    assert stored[1].detail.startswith("unserialisable_event:SlotWrite")


# --- 2. tool URLs -------------------------------------------------------------------------


def url_playbook(url: str, allow: list[str] | None = None) -> str:
    return f"""
policies: {{allow_hosts: {json.dumps(allow or ["127.0.0.1"])}}}
journeys:
  main:
    checkpoints:
      - id: ask
        slots:
          who: {{type: str}}
          q: {{type: str}}
        pipeline: visit
      - id: done
        terminal: true
tools:
  - id: visits
    url: "{url}"
    store_response_as: visits
pipelines:
  - {{id: visit, steps: [{{tool: visits}}]}}
"""


async def test_slot_values_in_a_url_are_percent_encoded_as_one_component() -> None:
    from superdialog_core.tools.runner import ToolRunner
    from test_tools import Call

    with LoopbackServer() as server:
        server.route("GET", "/admin/visits", Reply(200, json={"admin": True}))
        pb = playbook(url_playbook("{{ env.BASE }}/visits/{{ slots.who }}?q={{ slots.q }}&n=1"))
        call = Call(pb)
        call.write("who", "../../admin")
        call.write("q", "x&admin=1#frag")
        runner = ToolRunner(pb, env={"BASE": server.base_url + "/api"})
        await runner.run_tool("visits", state=call.state, emit=call.emit)
        (request,) = server.requests
        (logged,) = call.of(ev.ToolCall)
        assert logged.args["url"] == "<env.BASE>/visits/..%2F..%2Fadmin?q=x%26admin%3D1%23frag&n=1"
        assert request.path != "/admin/visits" and request.path.startswith("/api/visits/")
        assert request.query == {"q": "x&admin=1#frag", "n": "1"}


def test_a_url_template_keeps_scheme_host_and_port_out_of_the_values() -> None:
    scope = {"slots": {"x": "a/b?c#d&e", "dot": ".."}, "env": {"BASE": "http://h:1/v"}}
    url = compile_tool_url("{{ env.BASE }}/p/{{ slots.x }}?k={{ slots.x }}")
    assert url.render(scope) == "http://h:1/v/p/a%2Fb%3Fc%23d%26e?k=a%2Fb%3Fc%23d%26e"
    with pytest.raises(TemplateRefusal, match="'\\.\\.'"):
        compile_tool_url("http://h/p/{{ slots.dot }}/q").render(scope)
    for bad in ("http://{{ slots.x }}/", "http://h:{{ slots.x }}/p",
                "{{ env.BASE }}{{ slots.x }}", "https://h{{ slots.x }}"):
        with pytest.raises(PlaybookError, match="stands before the end of the host"):
            playbook(url_playbook(bad))


def test_a_url_template_cannot_rebind_env_to_skip_the_encoding() -> None:
    """``env`` values are used as written, so a name ``env`` bound in the template (set, a
    loop variable, a macro argument) would carry a slot into the URL raw: a load error."""
    for bad in ("http://h/v/{% set env = slots.who %}{{ env }}",
                "http://h/v/{% for env in [slots.who] %}{{ env }}{% endfor %}",
                "http://h/v/{% macro m(env) %}{{ env }}{% endmacro %}{{ m(slots.who) }}",
                "http://h/v/{% with env = slots.who %}{{ env }}{% endwith %}"):
        with pytest.raises(PlaybookError, match="binds the name env"):
            playbook(url_playbook(bad))


async def test_allow_hosts_entries_may_name_a_port() -> None:
    assert (await vet_url("http://127.0.0.1:8080/x", ["127.0.0.1:8080"])).port == 8080
    with pytest.raises(UrlRefused, match=r"127\.0\.0\.1:8081"):
        await vet_url("http://127.0.0.1:8081/x", ["127.0.0.1:8080"])
    assert (await vet_url("http://127.0.0.1:8081/x", ["127.0.0.1"])).port == 8081
    assert (await vet_url("http://[::1]:9000/x", ["[::1]:9000"])).address == "::1"
    with pytest.raises(PlaybookError, match="port from 1 to 65535"):
        playbook(url_playbook("http://127.0.0.1/x", ["127.0.0.1:http"]))


# --- 3./4. verdict parsing ----------------------------------------------------------------


def counting_loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    sizes: list[int] = []
    real = verdict_parse._loads

    def loads(text: str) -> Any:
        sizes.append(len(text))
        return real(text)

    monkeypatch.setattr(verdict_parse, "_loads", loads)
    return sizes


@pytest.mark.parametrize("shape", [
    lambda n: "{" * n,
    lambda n: "{x" * (n // 4) + "}" * (n // 4),
    lambda n: '{"a":"' * (n // 6),
    lambda n: "{}" * (n // 2),
    lambda n: "{ " * (n // 4) + '{"note": 1' + "}" * (n // 4),
])
def test_finding_the_verdict_is_bounded_work(monkeypatch, shape) -> None:
    sizes = counting_loads(monkeypatch)
    for n in (8_000, 60_000):
        sizes.clear()
        text = shape(n)
        with contextlib.suppress(VerdictError):
            parse_verdict(text)
        # The whole text once, then balanced spans within a budget of 4x the text.
        assert sum(sizes) <= 6 * len(text) + 2048, (n, sum(sizes))


def test_an_answer_over_the_cap_is_refused_before_parsing(monkeypatch) -> None:
    sizes = counting_loads(monkeypatch)
    with pytest.raises(VerdictTooLarge, match="65537 bytes, over the 65536-byte"):
        parse_verdict("{" * 65537)
    assert sizes == []
    with pytest.raises(VerdictTooLarge):
        parse_verdict({"note": "x" * 40_000, "spans": {"name": "y" * 40_000}})
    assert parse_verdict("{" * 100 + '{"note": "ok"}', cap=1024)["note"] == "ok"


@pytest.mark.parametrize("bad", [
    "[" * 20_000 + "]" * 20_000,
    '{"slots": ' * 5000 + "1" + "}" * 5000,
    '{"slots": {"party": 1' + "0" * 5000 + "}}",
    '{"slots": {"party": 1' + "0" * 64 + "}}",
])
def test_deep_nesting_and_huge_integers_are_parse_errors(bad: str) -> None:
    with pytest.raises(VerdictError):
        parse_verdict(bad)


@pytest.mark.parametrize("first", [
    "x" * 70_000,
    '{"slots": {"party": 1' + "0" * 5000 + "}}",
    '{"slots": ' * 3000 + "1" + "}" * 3000,
    {"slots": {"party": 10**5000}},
    {"slots": {"name": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["deep"]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}},
])
async def test_a_bad_answer_takes_the_normal_retry_and_later_turns_work(first: Any) -> None:
    rt = runtime(ScriptedDirector([first, {"slots": {"party": 4}}, {}]))
    await rt.start()
    await rt.user_turn("four of us")
    await rt.user_turn("and then")
    await rt.wait_idle()
    verdicts = of(rt.log, ev.Verdict)
    assert verdicts[0].attempts == 2 and verdicts[0].verdict == {"slots": {"party": 4}}
    assert len(verdicts) == 2
    assert not degraded(rt.log, "unparseable") and not [
        e for e in of(rt.log, ev.Degraded) if e.component == "runtime"]
    if isinstance(first, str) and len(first) > 65536:
        assert len(degraded(rt.log, "verdict_over_cap")) == 1
    rt.log.to_jsonl()


async def test_a_long_answer_is_parsed_off_the_event_loop(monkeypatch) -> None:
    threads: list[int] = []
    from superdialog_core.roles import asking

    real = asking.parse_verdict_counted

    def recording(raw: Any, **kw: Any) -> Any:
        threads.append(threading.get_ident())
        return real(raw, **kw)

    monkeypatch.setattr(asking, "parse_verdict_counted", recording)
    long_answer = "thinking " * 1200 + '{"slots": {"party": 2}}'
    rt = runtime(ScriptedDirector(['{"slots": {"party": 3}}', long_answer]))
    await rt.start()
    await rt.user_turn("three")
    await rt.user_turn("no, two")
    await rt.wait_idle()
    assert threads[0] == threading.get_ident()  # short: parsed in place
    assert threads[1] != threading.get_ident()  # 10 KB: in a worker thread
    assert rt.state.slots["party"].value == 2


def test_stored_values_are_bounded_with_a_clear_refusal() -> None:
    deep: Any = "x"
    for _ in range(33):
        deep = [deep]
    with pytest.raises(ValueTooLarge, match=r"value(\[0\])+: nested deeper than 32 levels"):
        clean_value(deep)
    with pytest.raises(ValueTooLarge, match="65537 bytes is over the 65536-byte limit"):
        clean_value({"a": "x" * 65537})
    with pytest.raises(ValueTooLarge, match="65 digits is over the 64-digit limit"):
        clean_value({"n": 10**64})
    assert clean_value({"n": 10**64 - 1, "s": "x" * 65536})[1] == 0


async def test_nan_and_infinity_are_refused_so_the_stored_log_matches_the_call(
    tmp_path: Path,
) -> None:
    """JSON has no NaN or Infinity: stored, they become null, and the state folded from the
    store would differ from the live call's. A value holding one is refused like an over-long one."""
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueTooLarge, match=r"value\.x\[0\]: .* not a finite number"):
            clean_value({"x": [bad]})
    text = """
journeys:
  main:
    checkpoints:
      - id: ask
        slots:
          extra: {type: object}
        advance_when:
          - {id: never, when: "slots.extra == 1", judge: expr, to: main.done}
      - id: done
        terminal: true
"""
    store = JsonlStore(tmp_path)
    answer = '{"slots": {"extra": {"x": -Infinity, "y": NaN}}}'
    rt = runtime(ScriptedDirector([answer, {"slots": {"extra": {"x": 1}}}]),
                 playbook=playbook(text), python_tools={}, store=store, session_id="call-1")
    await rt.start()
    await rt.user_turn("one")
    await rt.wait_idle()
    assert rt.state.slots["extra"].value == {"x": 1}  # the retry's answer
    (verdict,) = of(rt.log, ev.Verdict)
    assert verdict.attempts == 2  # the first answer was refused and retried
    stored = await store.load("call-1")
    assert stored is not None
    folded = ConversationState.fold(stored, rt.playbook)
    assert {k: s.value for k, s in folded.slots.items()} == {
        k: s.value for k, s in rt.state.slots.items()}


# --- 5. resume from anything ---------------------------------------------------------------


async def full_log() -> EventLog:
    store = MemoryStore()
    rt = runtime(ScriptedDirector([{"slots": {"party": 2}}, {"slots": {"name": "Ana"}}]),
                 store=store, session_id="call-1")
    await rt.start()
    await rt.user_turn("two of us")
    await rt.user_turn("I'm Ana")
    await rt.wait_idle()
    log = await store.load("call-1")
    assert log is not None and rt.state.ended
    return log


async def test_every_prefix_of_a_valid_log_resumes() -> None:
    log = await full_log()
    for cut in range(1, log.version + 1):
        store = MemoryStore()
        await store.append("call-1", list(log)[:cut])
        rt = runtime(ScriptedDirector([{"slots": {"name": "Ana"}}] * 3), store=store,
                     session_id="call-1")
        await rt.start()
        await rt.user_turn("I'm Ana")
        await rt.wait_idle()
        assert rt.state.checkpoint is not None, cut
        bugs = [e.detail for e in of(rt.log, ev.Degraded) if e.component == "runtime"]
        assert bugs == [], (cut, bugs)
        inits = [e for e in of(rt.log, ev.Advance) if e.rule_id == "init"]
        assert len(inits) == 1, cut
        assert len(of(rt.log, ev.SessionStart)) == 1


async def test_a_torn_last_line_is_cut_on_resume_with_a_log_repaired_event(tmp_path: Path) -> None:
    log = await full_log()
    store = JsonlStore(tmp_path)
    await store.append("call-1", list(log)[:5])
    torn = b'{"type":"utterance","version":6,"role":"us'
    with store.path("call-1").open("ab") as handle:
        handle.write(torn)
    with pytest.raises(LogCorruptError) as info:
        await store.load("call-1")
    assert info.value.torn_tail and info.value.line_number == 6
    rt = runtime(ScriptedDirector([{"slots": {"name": "Ana"}}]), store=store, session_id="call-1")
    await rt.start()
    await rt.wait_idle()
    (repaired,) = of(rt.log, ev.LogRepaired)
    assert repaired.version == 6 and repaired.cut_bytes == len(torn)
    assert repaired.cut_records == 1 and repaired.line == 6
    stored = await store.load("call-1")
    assert stored is not None and stored.version == rt.log.version


async def test_an_append_after_a_write_cut_before_its_newline_starts_a_new_line(
    tmp_path: Path,
) -> None:
    store = JsonlStore(tmp_path)
    log = EventLog()
    log.append(ev.Utterance(role="user", text="one"))
    log.append(ev.Utterance(role="user", text="two"))
    await store.append("s", [log[0]])
    path = store.path("s")
    path.write_bytes(path.read_bytes().rstrip(b"\n"))  # lost only the final newline
    fresh = JsonlStore(tmp_path)
    loaded = await fresh.load("s")
    assert loaded is not None and loaded.version == 1
    await fresh.append("s", [log[1]])
    again = await JsonlStore(tmp_path).load("s")
    assert again is not None and [e.text for e in again] == ["one", "two"]


async def test_a_line_altered_mid_log_is_an_error_naming_it_until_repair(tmp_path: Path) -> None:
    log = await full_log()
    store = JsonlStore(tmp_path)
    await store.append("call-1", list(log))
    path = store.path("call-1")
    lines = path.read_bytes().split(b"\n")
    target = next(i for i, line in enumerate(lines) if b'"two of us"' in line)
    lines[target] = lines[target].replace(b"two of us", b"ten of us")  # still valid JSON
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(LogCorruptError, match=f"line {target + 1}.*checksum mismatch") as info:
        await store.load("call-1")
    assert not info.value.torn_tail and info.value.session_id == "call-1"
    with pytest.raises(LogCorruptError):
        await runtime(ScriptedDirector([]), store=store, session_id="call-1").start()
    report = await store.repair("call-1")
    assert report is not None and report.line == target + 1 and report.log.version == target
    assert report.cut_records == log.version - target
    rt = runtime(ScriptedDirector([{"slots": {"party": 2}}] * 3), store=store, session_id="call-1")
    await rt.start()
    await rt.user_turn("two of us")
    await rt.wait_idle()
    assert rt.log.version > target


def test_lines_without_a_checksum_are_still_accepted() -> None:
    log = EventLog()
    log.append(ev.Utterance(role="user", text="old"))
    log.append(ev.Utterance(role="user", text="new"))
    mixed = log.to_jsonl().splitlines()[0] + "\n" + encode_line(log[1]).decode() + "\n"
    assert [e.text for e in EventLog.from_jsonl(mixed)] == ["old", "new"]
    sealed = seal(ev.encode(log[0]))
    assert unseal(sealed) == ev.encode(log[0]) and json.loads(sealed)["crc32"]


def test_every_store_has_repair_on_the_protocol(tmp_path: Path) -> None:
    assert "repair" in LogStore.__dict__
    for store in (MemoryStore(), JsonlStore(tmp_path), SQLiteStore(tmp_path / "x.db")):
        assert isinstance(store, LogStore)


async def test_sqlite_row_damage_is_named_and_repair_keeps_the_prefix(tmp_path: Path) -> None:
    log = await full_log()
    store = SQLiteStore(tmp_path / "logs.db")
    await store.append("call-1", list(log))
    store._db.execute("UPDATE events SET line = replace(line, 'two of us', 'ten of us')")
    with pytest.raises(LogCorruptError, match=r"logs\.db#call-1.*checksum mismatch") as info:
        await store.load("call-1")
    bad = info.value.line_number
    report = await store.repair("call-1")
    assert isinstance(report, RepairReport) and report.log.version == bad - 1
    assert report.cut_records == log.version - bad + 1 and report.cut_bytes > 0
    again = await store.load("call-1")
    assert again is not None and again.version == bad - 1


async def test_a_damaged_sqlite_file_is_a_log_corrupt_error_and_repair_rebuilds_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "logs.db"
    store = SQLiteStore(path)
    for i in range(120):
        log = EventLog()
        for j in range(12):
            log.append(ev.Utterance(role="user", text=f"session {i} turn {j} " + "x" * 120))
        await store.append(f"s{i}", list(log))
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    data = bytearray(path.read_bytes())
    middle = len(data) // 2 // 4096 * 4096
    data[middle : middle + 3 * 4096] = os.urandom(3 * 4096)
    path.write_bytes(bytes(data))
    store = SQLiteStore(path)
    damaged: list[LogCorruptError] = []
    for i in range(120):
        try:
            await store.load(f"s{i}")
        except LogCorruptError as exc:
            damaged.append(exc)
        except sqlite3.DatabaseError as exc:  # never raw
            pytest.fail(f"raw DatabaseError: {exc}")
    assert damaged, "the damaged pages held no session (test set-up)"
    first = damaged[0]
    assert str(path) in str(first) and first.session_id in str(first)
    report = await store.repair(first.session_id)
    assert report is not None and report.set_aside and Path(report.set_aside).exists()
    for i in range(120):
        await store.load(f"s{i}")  # every session loads again (a prefix, maybe empty)
    path.write_bytes(b"not a database" * 100)
    broken = SQLiteStore(path)
    with pytest.raises(LogCorruptError, match="file is not a database"):
        await broken.load("s1")
    assert (await broken.repair("s1")) is not None
    assert await broken.load("s1") is None
    await broken.append("s1", list(EventLog([])))


# --- 6. caps ------------------------------------------------------------------------------


async def test_an_over_long_utterance_is_kept_in_part_and_cut_for_the_models() -> None:
    director = ScriptedDirector([{}])
    talker = ScriptedTalker(["Hello?", "Sorry, could you say that shorter?"])
    rt = runtime(director, talker)
    await rt.start()
    words = "é" + "word " * 20_000  # 100,001 characters, 100,002 bytes
    await rt.user_turn(words)
    await rt.wait_idle()
    (user,) = [e for e in of(rt.log, ev.Utterance) if e.role == "user"]
    assert len(user.text.encode()) <= 65536 and words.startswith(user.text)
    assert user.text_length == len(words)
    assert user.text_sha256 == hashlib.sha256(words.encode()).hexdigest()
    assert degraded(rt.log, "utterance_logged_in_part") and degraded(rt.log, "utterance_cut_for_models")
    seen = [m["content"] for r in director.requests for m in r.messages]
    assert max(len(c) for c in seen if "word word" in c) < 4000 + 200
    talked = [m["content"] for r in talker.requests for m in r.messages if m["role"] == "user"]
    assert all(len(c) <= 4000 for c in talked)


def test_unique_of_dicts_is_linear() -> None:
    compared = [0]

    class Counted(dict):  # a dict that counts equality comparisons
        __hash__ = None  # type: ignore[assignment]

        def __eq__(self, other: object) -> bool:
            compared[0] += 1
            return dict.__eq__(self, other)

    items = [Counted(a=i % 500) for i in range(5000)]
    out = evaluate("unique(args.items)", {"args": {"items": items}})
    assert [d["a"] for d in out] == list(range(500))
    assert compared[0] <= len(items)  # the old version compared every pair: ~1.2 million


def test_templates_that_would_run_for_seconds_are_refused() -> None:
    for text in ("{{ 'a' * 10**8 }}", "{{ 2 ** 100000 }}", "{{ range(10**7) | list }}",
                 "{{ 10.0 ** 400 }}",  # a float overflow: a load error, not a raw OverflowError
                 "{% for a in range(1000) %}{% for b in range(1000) %}.{% endfor %}{% endfor %}"):
        with pytest.raises(PlaybookError, match="too much work"):
            playbook(PLAYBOOK.replace("goal: Look the caller up", f"guidance: \"{text}\""))
    # Data-driven: bounded at render time, the failing part says why.
    text, detail = compile_speech("{{ 'ab' * slots.n }}").render({"slots": {"n": 10**6}})
    assert text == "" and detail is not None and "repetition" in detail
    text, detail = compile_speech(
        "{% for a in range(slots.n) %}{% for b in range(slots.n) %}{% endfor %}{% endfor %}ok"
    ).render({"slots": {"n": 9000}})
    assert detail is not None and "100000 limit" in detail


def test_padding_in_format_strings_is_bounded_like_repetition() -> None:
    """A width in a format string builds a string of that many characters: ``%`` (which
    Jinja would even compute while compiling), ``str.format``, ``|format`` and ``|center``."""
    for text in ("{{ '%90000000s' % 1 }}", "{{ '%.*f' % (90000000, 1) }}"):
        with pytest.raises(PlaybookError, match="too much work"):
            playbook(PLAYBOOK.replace("goal: Look the caller up", f"guidance: \"{text}\""))
    for text in ("{{ '{:>90000000}'.format(slots.s) }}", "{{ '{:>{}}'.format(slots.s, slots.n) }}",
                 "{{ '%*s' % (slots.n, slots.s) }}", "{{ '%90000000s' | format(slots.s) }}",
                 "{{ slots.s | center(slots.n) }}"):
        out, detail = compile_speech(text).render({"slots": {"s": "a", "n": 90_000_000}})
        assert out == "" and detail is not None and "limit" in detail, (text, detail)
    out, detail = compile_speech("{{ '%5.1f|{:>6}' % 2.25 }}|{{ '{:>4}'.format('ab') }}|"
                                 "{{ 'x' | center(5) }}").render({})
    assert detail is None and out == "  2.2|{:>6}|  ab|  x  "


def test_loops_over_data_stop_at_the_output_bound() -> None:
    """Nested loops over a list from the data are not ranges: what they print is bounded, so
    a 400-item list in three nested loops (64 million lines) is cut at the bound, not built."""
    from superdialog_core.lang.sandbox import MAX_OUTPUT

    loops = "{% for a in slots.l %}{% for b in slots.l %}{% for c in slots.l %}x{% endfor %}" \
            "{% endfor %}{% endfor %}"
    printed: list[int] = []

    class Counting(list):  # counts the items the loops walk (the work done)
        def __iter__(self) -> Any:
            for item in super().__iter__():
                printed.append(1)
                yield item

    out, detail = compile_speech(loops).render({"slots": {"l": Counting(range(400))}})
    assert out == "" and detail is not None and f"{MAX_OUTPUT}" in detail
    assert len(printed) < 2 * MAX_OUTPUT
    with pytest.raises(TemplateRefusal, match=f"{MAX_OUTPUT}"):
        compile_tool_text("{% for a in slots.l %}{% for b in slots.l %}xx{% endfor %}{% endfor %}"
                          ).render({"slots": {"l": list(range(400))}})
    assert compile_speech("{% for a in slots.l %}{{ a }}{% endfor %}").render(
        {"slots": {"l": [1, 2, 3]}}) == ("123", None)


async def test_caps_are_settable_in_policies() -> None:
    pb = playbook(PLAYBOOK + "policies: {caps: {model_chars: 100, verdict_bytes: 2048}}\n")
    director = ScriptedDirector(["{" * 3000, {}])
    rt = runtime(director, playbook=pb)
    await rt.start()
    await rt.user_turn("x" * 500)
    await rt.wait_idle()
    assert degraded(rt.log, "utterance_cut_for_models")
    assert degraded(rt.log, "verdict_over_cap") and of(rt.log, ev.Verdict)[0].attempts == 2
    with pytest.raises(PlaybookError, match="model_chars"):
        playbook(PLAYBOOK + "policies: {caps: {model_chars: 5}}\n")


def test_a_raw_newline_inside_a_verdict_string_is_read_not_retried() -> None:
    # SmolLM2 wrote {"note": "...\n"} with a real newline inside the string: strict JSON
    # refuses it, which cost the turn its verdict after the retry.
    from superdialog_core.roles.verdict_parse import parse_verdict

    verdict = parse_verdict('{ "note" : "Breathe, I am here.\n", "slots": {"a": "x\ty"}}')
    assert verdict["note"] == "Breathe, I am here.\n"
    assert verdict["slots"] == {"a": "x\ty"}
