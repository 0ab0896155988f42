"""EventLog: stamping, contiguity, lookups and the JSONL form (SPEC §5, §13)."""

from __future__ import annotations

import pytest
from superdialog_core.events import (
    Advance,
    SessionStart,
    SlotWrite,
    ToolResult,
    Utterance,
    encode,
)
from superdialog_core.log.eventlog import EventLog, LogCorruptError


def _fixed_clock() -> float:
    return 1_700_000_000.0


def _sample_log() -> EventLog:
    log = EventLog(clock=_fixed_clock)
    log.append(
        SessionStart(session_id="s1", playbook_hash="h", anchor="2026-11-30T09:00:00+00:00")
    )
    log.append(Advance(from_=None, to="booking.collect", rule_id="init", by="init"))
    log.append(Utterance(role="user", text="table for four"))
    log.append(SlotWrite(key="party_size", value=4, status="accepted", by="director"))
    log.append(ToolResult(tool="lookup", ok=True, status=200, data={"x": [1, 2]}, store_as="r"))
    return log


def test_append_stamps_in_place_and_returns_the_same_object() -> None:
    log = EventLog(clock=_fixed_clock)
    event = Utterance(role="user", text="hi")
    returned = log.append(event)
    assert returned is event
    assert event.version == 1
    assert event.at == 1_700_000_000.0
    assert log.version == 1 and len(log) == 1


def test_append_refuses_an_already_stamped_event() -> None:
    log = EventLog()
    event = log.append(Utterance(role="user", text="hi"))
    with pytest.raises(ValueError, match="already stamped with version 1"):
        log.append(event)
    with pytest.raises(ValueError, match="already stamped"):
        EventLog().append(event)
    assert len(log) == 1


def test_append_refuses_a_non_event() -> None:
    with pytest.raises(TypeError, match="only events"):
        EventLog().append({"type": "utterance"})  # type: ignore[arg-type]


def test_constructor_names_the_first_gap() -> None:
    log = _sample_log()
    events = list(log)
    with pytest.raises(ValueError, match=r"position 2, which holds version 4 where 3"):
        EventLog([events[0], events[1], events[3]])
    with pytest.raises(ValueError, match="position 0"):
        EventLog([Utterance(role="user", text="unstamped")])
    assert len(EventLog(events)) == 5


def test_lookups_by_index_and_version() -> None:
    log = _sample_log()
    assert log[0].version == 1
    assert log[-1].version == 5
    assert [e.version for e in log[1:3]] == [2, 3]
    assert log.get(4) is log[3]
    assert log.get(0) is None and log.get(6) is None
    assert [e.version for e in log.since(3)] == [4, 5]
    assert log.since(5) == [] and len(log.since(0)) == 5
    assert [e.version for e in log] == [1, 2, 3, 4, 5]
    assert log.extend([Utterance(role="user", text="a"), Utterance(role="user", text="b")])[
        -1
    ].version == 7


def test_jsonl_round_trip_is_newline_terminated_and_equal() -> None:
    log = _sample_log()
    text = log.to_jsonl()
    assert text.endswith("\n") and text.count("\n") == 5
    assert '"from":null' not in text  # defaults are omitted
    again = EventLog.from_jsonl(text)
    assert list(again) == list(log)
    assert EventLog.from_jsonl(text.encode()).to_jsonl() == text
    assert EventLog().to_jsonl() == ""
    assert len(EventLog.from_jsonl("")) == 0


def test_advance_from_is_written_as_from() -> None:
    log = EventLog()
    log.append(Advance(from_="a.b", to="a.c", rule_id="a.b.0", by="director"))
    assert '"from":"a.b"' in log.to_jsonl()
    assert EventLog.from_jsonl(log.to_jsonl())[0].from_ == "a.b"  # type: ignore[attr-defined]


def test_corrupt_line_names_the_line_and_keeps_the_prefix() -> None:
    lines = _sample_log().to_jsonl().splitlines()
    lines[3] = lines[3][:20]  # a truncated write
    text = "\n".join(lines) + "\n"
    with pytest.raises(LogCorruptError) as info:
        EventLog.from_jsonl(text, source="calls/s1.jsonl")
    err = info.value
    assert err.line_number == err.line == 4
    assert "calls/s1.jsonl, line 4" in str(err)
    assert [e.version for e in err.prefix] == [1, 2, 3]
    # The prefix is a working log: the runtime can resume and append to it.
    assert err.prefix.append(Utterance(role="user", text="again")).version == 4


def test_blank_lines_are_skipped_but_counted() -> None:
    lines = _sample_log().to_jsonl().splitlines()
    text = lines[0] + "\n\n" + lines[1] + "\n" + '{"type":"nope","version":3}\n'
    with pytest.raises(LogCorruptError) as info:
        EventLog.from_jsonl(text)
    assert info.value.line_number == 4
    assert len(info.value.prefix) == 2


def test_unknown_type_and_version_gap_are_corrupt() -> None:
    first = encode(Utterance(role="user", text="x", version=1)).decode()
    skipped = encode(Utterance(role="user", text="y", version=3)).decode()
    with pytest.raises(LogCorruptError, match="version 3 where 2 was expected") as info:
        EventLog.from_jsonl(first + "\n" + skipped + "\n")
    assert info.value.line_number == 2
    with pytest.raises(LogCorruptError, match="line 1"):
        EventLog.from_jsonl('{"type":"utterance","version":1}\n')  # missing role and text


def test_invalid_utf8_names_the_line() -> None:
    good = _sample_log().to_jsonl().encode()
    with pytest.raises(LogCorruptError, match="not UTF-8") as info:
        EventLog.from_jsonl(good + b'{"type":"utterance","text":"\xff"}\n')
    assert info.value.line_number == 6
    assert len(info.value.prefix) == 5


def test_docs_events_md_shows_every_event_type_with_lines_that_decode() -> None:
    import json
    from pathlib import Path

    from superdialog_core.events import EVENT_TYPES, decode

    doc = Path(__file__).resolve().parent.parent / "docs" / "events.md"
    lines = [line for line in doc.read_text(encoding="utf-8").splitlines()
             if line.startswith('{"type":')]
    seen = set()
    for line in lines:
        event = decode(line)
        # The example is exactly the encoding (no hand-written drift from the real form).
        assert encode(event).decode() == line, line
        seen.add(json.loads(line)["type"])
    assert seen == set(EVENT_TYPES), f"undocumented: {set(EVENT_TYPES) - seen}"
