"""The confirmation rules of SPEC §4.2-4.3: one test per rule, each fails if the rule breaks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from superdialog_core import events as ev
from superdialog_core.log.eventlog import EventLog
from superdialog_core.log.slots import (
    plan_confirm,
    plan_deny,
    plan_withdraw,
    plan_write,
    read_back_items,
    requires_status,
    same_value,
)
from superdialog_core.log.state import ConversationState
from superdialog_core.playbook import Playbook

DOC: dict[str, Any] = {
    "name": "slots-test",
    "call_start": {"customer_id": {"type": "str"}},
    "journeys": {
        "booking": {
            "checkpoints": [
                {
                    "id": "collect",
                    "slots": {
                        "party_size": {
                            "type": "int",
                            "invalidates": ["date", "results.availability", "party_size"],
                        },
                        "name": {"type": "str"},
                        "phone": {"type": "phone", "confirm": True},
                    },
                    "pipeline": "lookup",
                    "advance_when": [
                        {"when": "has both", "to": "booking.details",
                         "requires": ["party_size", "name"]},
                    ],
                },
                {
                    "id": "details",
                    "gate": "hard",
                    "slots": {
                        "date": {"type": "date"},
                        "time": {"type": "time"},
                        "notes": {"type": "str", "gate": "soft"},
                        "account": {"type": "str", "authoritative": True},
                    },
                    "pipeline": "check",
                    "advance_when": [
                        {"when": "caller agrees", "to": "booking.done",
                         "requires": ["date", "party_size", "notes"]},
                        {"when": "slots.date", "judge": "expr", "to": "booking.done",
                         "requires": ["name"]},
                    ],
                },
                {"id": "done", "terminal": True, "outcome": "booked"},
            ]
        }
    },
    "tools": [
        {"id": "availability", "url": "http://127.0.0.1/a?t={{ slots.time }}",
         "store_response_as": "availability"},
        {"id": "find", "url": "http://127.0.0.1/f?p={{ slots.phone }}"},
    ],
    "pipelines": [
        {"id": "check", "steps": [{"tool": "availability"}]},
        {"id": "lookup", "steps": [{"tool": "find"}]},
    ],
}


@dataclass(frozen=True)
class _CompiledText:
    """What the loader attaches as ``ToolSpec._url``: only its ``slot_refs`` matter here."""

    slot_refs: frozenset[str]


def _playbook() -> Playbook:
    playbook = Playbook.model_validate(DOC)
    # Stand in for the template compiler (tested in its own module): the urls above read these.
    playbook.tool("availability")._url = _CompiledText(frozenset({"time"}))
    playbook.tool("find")._url = _CompiledText(frozenset({"phone"}))
    return playbook


class Call:
    """A log and its state, with an ``emit`` that appends and applies (as the runtime does)."""

    def __init__(self, at: str = "booking.collect") -> None:
        self.playbook = _playbook()
        self.log = EventLog(clock=lambda: 1.0)
        self.state = ConversationState(self.playbook)
        self.emit(ev.SessionStart(session_id="s", playbook_hash="h",
                                  anchor="2026-11-30T09:00:00+00:00"))
        self.emit(ev.Advance(to=at, rule_id="init", by="init"))

    def emit(self, *events: ev.Event) -> list[ev.Event]:
        for event in events:
            self.log.append(event)
            self.state.apply(event)
        return list(events)

    def write(self, key: str, value: Any, by: ev.WrittenBy = "director") -> list[ev.Event]:
        return self.emit(*plan_write(self.state, self.playbook, key, value, by))

    def say(self, text: str, kind: str = "talker", spoke_from: int | None = -1,
            **fields: Any) -> ev.Utterance:
        spoke = self.state.version if spoke_from == -1 else spoke_from
        utterance = ev.Utterance(role="assistant", text=text, kind=kind,
                                 spoke_from_version=spoke, **fields)
        self.emit(utterance)
        return utterance

    def hear(self, text: str) -> int:
        return self.emit(ev.Utterance(role="user", text=text))[0].version

    def confirm(self, key: str, user_version: int, changed: set[str] | None = None) -> list[ev.Event]:
        return plan_confirm(self.state, self.playbook, key, user_version=user_version,
                            changed_in_verdict=changed or set())


def _status(call: Call, key: str) -> str:
    return call.state.slots[key].status


def _refusal(events: list[ev.Event]) -> str:
    assert len(events) == 1 and isinstance(events[0], ev.Degraded), events
    return events[0].detail


# --- §4.2 status -------------------------------------------------------------------------


def test_director_write_is_accepted_at_soft_and_provisional_at_hard_gate() -> None:
    call = Call()
    call.write("name", "Ada")
    assert _status(call, "name") == "accepted"
    call.write("date", "2026-12-01")  # declared at the hard 'details', written at 'collect'
    assert _status(call, "date") == "provisional"
    call.write("notes", "window seat")  # its own gate: soft overrides the checkpoint's hard
    assert _status(call, "notes") == "accepted"


def test_confirm_true_makes_a_soft_slot_provisional() -> None:
    call = Call()
    call.write("phone", "+33612345678")
    assert _status(call, "phone") == "provisional"


@pytest.mark.parametrize("by", ["tool", "rule", "call_start", "caller", "policy"])
def test_authoritative_origins_write_confirmed(by: ev.WrittenBy) -> None:
    call = Call()
    events = call.write("date", "2026-12-01", by=by)
    assert [(e.status, e.by) for e in events] == [("confirmed", by)]  # type: ignore[attr-defined]


def test_unknown_writer_is_an_error() -> None:
    call = Call()
    with pytest.raises(ValueError, match="unknown writer 'talker'"):
        plan_write(call.state, call.playbook, "name", "x", "talker")  # type: ignore[arg-type]


def test_hard_gate_requires_are_met_by_accepted_or_confirmed_only() -> None:
    call = Call(at="booking.details")
    rule = call.playbook.checkpoint("booking.details").advance_when[0]
    assert requires_status(call.state, call.playbook, rule) == (
        ["date", "party_size", "notes"], [])
    call.write("date", "2026-12-01")  # provisional
    call.write("party_size", 4)  # accepted (soft slot)
    call.write("notes", "none", by="tool")  # confirmed
    assert requires_status(call.state, call.playbook, rule) == ([], ["date"])
    call.emit(ev.SlotWrite(key="date", value="2026-12-01", status="confirmed", by="caller"))
    assert requires_status(call.state, call.playbook, rule) == ([], [])


def test_soft_gate_requires_are_met_by_any_filled_value() -> None:
    call = Call()
    call.write("date", "2026-12-01")  # provisional
    assert _status(call, "date") == "provisional"
    assert requires_status(call.state, call.playbook, ["date", "name"]) == (["name"], [])
    # The same state judged at the hard checkpoint: the provisional value does not count.
    assert requires_status(call.state, call.playbook, ["date"], "booking.details") == ([], ["date"])


def test_a_correction_replaces_and_needs_confirming_again() -> None:
    call = Call()
    call.write("date", "2026-12-01")
    call.emit(ev.SlotWrite(key="date", value="2026-12-01", status="confirmed", by="caller"))
    events = call.write("date", "2026-12-02")
    assert [(e.value, e.status) for e in events] == [("2026-12-02", "provisional")]  # type: ignore[attr-defined]
    assert call.state.slots["date"].value == "2026-12-02"
    # A tool's different value replaces a confirmed one too.
    assert call.write("date", "2026-12-03", by="tool")[0].value == "2026-12-03"  # type: ignore[attr-defined]


def test_identical_write_is_a_no_op() -> None:
    call = Call()
    call.write("name", "Ada")
    assert plan_write(call.state, call.playbook, "name", "Ada", "director") == []
    # Restating a confirmed value does not re-open it; a stronger status does write.
    call.write("date", "2026-12-01")
    call.emit(ev.SlotWrite(key="date", value="2026-12-01", status="confirmed", by="caller"))
    assert plan_write(call.state, call.playbook, "date", "2026-12-01", "director") == []
    assert len(plan_write(call.state, call.playbook, "name", "Ada", "tool")) == 1
    # The same JSON number is the same value; another JSON type is a change.
    call.write("party_size", 4)
    assert plan_write(call.state, call.playbook, "party_size", 4.0, "director") == []
    assert len(plan_write(call.state, call.playbook, "party_size", "4", "director")) == 2
    assert not same_value(1, True) and not same_value([1], [True])
    assert same_value({"a": [1]}, {"a": [1.0]}) and not same_value({"a": 1}, {"b": 1})


def test_invalidates_fires_only_when_an_existing_value_changes() -> None:
    call = Call()
    call.write("date", "2026-12-01", by="tool")
    call.emit(ev.ToolResult(tool="availability", ok=True, data=[1], store_as="availability"))
    first = call.write("party_size", 4)  # a first write never invalidates
    assert [type(e) for e in first] == [ev.SlotWrite]
    assert plan_write(call.state, call.playbook, "party_size", 4, "director") == []
    changed = call.write("party_size", 6)
    clears = [(e.key, e.reason) for e in changed if isinstance(e, ev.SlotClear)]
    assert clears == [("date", "invalidated by party_size"),
                      ("results.availability", "invalidated by party_size")]
    assert "date" not in call.state.slots and "availability" not in call.state.results
    # Nothing left to invalidate: only the write.
    assert [type(e) for e in call.write("party_size", 2)] == [ev.SlotWrite]


def test_authoritative_and_call_start_slots_refuse_the_director() -> None:
    call = Call()
    for key in ("account", "customer_id"):
        events = plan_write(call.state, call.playbook, key, "X1", "director")
        assert len(events) == 1 and isinstance(events[0], ev.SlotRefused)
        assert events[0].message == f"{key}: this value is set by the system; do not ask the caller for it"
    assert call.write("account", "A-1", by="tool")[0].status == "confirmed"  # type: ignore[attr-defined]
    assert call.write("customer_id", "C-9", by="call_start")[0].by == "call_start"  # type: ignore[attr-defined]


def test_director_write_of_an_unknown_slot_is_refused() -> None:
    call = Call()
    events = plan_write(call.state, call.playbook, "nope", 1, "director")
    assert isinstance(events[0], ev.SlotRefused) and "not a slot" in events[0].message


def test_rule_set_null_clears_the_slot() -> None:
    call = Call()
    call.write("name", "Ada")
    events = call.write("name", None, by="rule")
    assert [(type(e), e.reason) for e in events] == [(ev.SlotClear, "cleared by rule")]  # type: ignore[attr-defined]
    assert "name" not in call.state.slots
    assert plan_write(call.state, call.playbook, "name", None, "rule") == []


def test_withdraw_turns_confirmed_back_into_provisional() -> None:
    call = Call()
    call.write("phone", "+33612345678", by="tool")
    events = plan_withdraw(call.state, "phone")
    assert [(e.status, e.by, e.value) for e in events] == [  # type: ignore[attr-defined]
        ("provisional", "policy", "+33612345678")]
    call.emit(*events)
    assert plan_withdraw(call.state, call.playbook, "phone") == []  # already open
    assert plan_withdraw(call.state, "name") == []  # empty: nothing to re-open
    with pytest.raises(ValueError, match="cannot withdraw 'nope'"):
        plan_withdraw(call.state, "nope")


def test_deny_clears_and_counts_as_still_needed() -> None:
    call = Call(at="booking.details")
    call.write("date", "2026-12-01")
    events = call.emit(*plan_deny(call.state, "date"))
    assert [(e.key, e.reason) for e in events] == [("date", "denied")]  # type: ignore[attr-defined]
    assert "date" not in call.state.slots
    assert read_back_items(call.state, call.playbook) == ["date"]
    assert plan_deny(call.state, "date") == []
    call.write("date", "2026-12-05")  # asked again and given: it is a read-back item as a value
    assert read_back_items(call.state, call.playbook) == ["date"]
    assert call.state.denied == set()


def test_deny_fires_invalidates() -> None:
    call = Call()
    call.write("party_size", 4)
    call.write("date", "2026-12-01", by="tool")
    events = plan_deny(call.state, "party_size")
    assert [(e.key, e.reason) for e in events] == [  # type: ignore[attr-defined]
        ("party_size", "denied"), ("date", "invalidated by party_size")]


# --- §4.3 read-back confirmation ---------------------------------------------------------


def _read_back_ready() -> tuple[Call, int]:
    call = Call(at="booking.details")
    call.write("date", "2026-12-01")
    call.say("So that is Tuesday the first of December, right?")
    return call, call.hear("yes")


def test_confirm_after_a_heard_read_back_confirms() -> None:
    call, user = _read_back_ready()
    events = call.confirm("date", user)
    assert [(e.key, e.value, e.status, e.by) for e in events] == [  # type: ignore[attr-defined]
        ("date", "2026-12-01", "confirmed", "caller")]


def test_confirm_condition_a_slot_must_be_filled_and_provisional() -> None:
    call, user = _read_back_ready()
    assert _refusal(call.confirm("time", user)) == "confirm_refused:time:not_filled"
    call.write("notes", "quiet table")  # accepted: nothing to confirm
    assert call.confirm("notes", user) == []
    call.emit(*call.confirm("date", user))
    assert call.confirm("date", user) == []  # confirming twice is harmless


def test_confirm_condition_b_must_answer_a_talker_or_verbatim_line() -> None:
    call = Call(at="booking.details")
    call.write("date", "2026-12-01")
    call.say("So the first of December?")
    call.say("Are you still there?", kind="prompt", spoke_from=None)
    user = call.hear("yes")
    assert _refusal(call.confirm("date", user)) == "confirm_refused:date:answers_prompt"
    # Filler between the read-back and the answer is passed over.
    call2 = Call(at="booking.details")
    call2.write("date", "2026-12-01")
    call2.say("So the first of December?")
    call2.say("One moment.", kind="filler", filler=True)
    assert call2.confirm("date", call2.hear("yes"))[0].status == "confirmed"  # type: ignore[attr-defined]
    # The caller's second utterance answers their first, not the read-back.
    call3, _first = _read_back_ready()
    second = call3.hear("and also")
    assert _refusal(call3.confirm("date", second)) == "confirm_refused:date:no_read_back_before_turn"
    assert _refusal(call3.confirm("date", 999)).startswith("confirm_refused:date:no_user_utterance")


def test_confirm_condition_c_read_back_must_be_fully_heard() -> None:
    call = Call(at="booking.details")
    call.write("date", "2026-12-01")
    said = call.say("So that is Tuesday the first of December, right?")
    call.emit(ev.SpeechCorrection(utterance_version=said.version, heard_text="So that is"))
    user = call.hear("yes")
    assert _refusal(call.confirm("date", user)) == "confirm_refused:date:read_back_not_fully_heard"


@pytest.mark.parametrize("heard", [
    "So that is Tuesday the first of December, right?",
    "  So that is Tuesday the first of December, right? ",  # whitespace aside, all of it
])
def test_a_correction_that_reports_the_full_text_does_not_refuse_the_confirm(heard: str) -> None:
    call = Call(at="booking.details")
    call.write("date", "2026-12-01")
    said = call.say("So that is Tuesday the first of December, right?")
    call.emit(ev.SpeechCorrection(utterance_version=said.version, heard_text=heard))
    entry = call.state.entry(said.version)
    assert entry is not None and not entry.interrupted and entry.fully_heard
    user = call.hear("yes")
    events = call.confirm("date", user)
    assert [(e.key, e.status) for e in events] == [("date", "confirmed")]  # type: ignore[attr-defined]


def test_confirm_condition_d_read_back_must_be_spoken_after_the_write() -> None:
    call = Call(at="booking.details")
    call.write("date", "2026-12-01")
    before = call.state.version - 1  # rendered from a snapshot taken before the write
    call.say("Which day would you like?", spoke_from=before)
    user = call.hear("yes the first")
    assert _refusal(call.confirm("date", user)) == "confirm_refused:date:read_back_older_than_value"
    # A verbatim line has no snapshot: its own version counts, and it is after the write.
    call2 = Call(at="booking.details")
    call2.write("date", "2026-12-01")
    call2.say("Please confirm your booking for the first.", kind="verbatim", spoke_from=None)
    assert call2.confirm("date", call2.hear("yes"))[0].status == "confirmed"  # type: ignore[attr-defined]


def test_confirm_condition_e_same_verdict_must_not_change_the_slot() -> None:
    call, user = _read_back_ready()
    refused = call.confirm("date", user, changed={"date"})
    assert _refusal(refused) == "confirm_refused:date:changed_in_same_verdict"
    assert call.confirm("date", user, changed={"time"})[0].status == "confirmed"  # type: ignore[attr-defined]


# --- read-back items -------------------------------------------------------------------


def test_read_back_lists_provisional_slots_hard_rules_require_or_tools_send() -> None:
    call = Call(at="booking.details")
    assert read_back_items(call.state, call.playbook) == []
    call.write("time", "19:00")  # sent by the pipeline's tool
    call.write("date", "2026-12-01")  # required by a hard-gate rule
    call.write("notes", "quiet")  # required but accepted: nothing to confirm
    call.write("phone", "+33612345678")  # provisional, but not needed here
    assert read_back_items(call.state, call.playbook) == ["date", "time"]
    call.emit(ev.SlotWrite(key="date", value="2026-12-01", status="confirmed", by="caller"))
    assert read_back_items(call.state, call.playbook) == ["time"]


def test_read_back_at_a_soft_gate_only_lists_what_tools_send() -> None:
    call = Call()
    call.write("date", "2026-12-01")  # provisional but the soft rules do not need it confirmed
    call.write("phone", "+33612345678")  # the 'find' tool of this checkpoint sends it
    assert read_back_items(call.state, call.playbook) == ["phone"]


def test_read_back_with_templates_compiled_by_the_loader() -> None:
    playbook = Playbook.from_dict(DOC)
    state = ConversationState(playbook)
    log = EventLog()
    for event in (
        ev.SessionStart(session_id="s", playbook_hash="h", anchor="2026-11-30T09:00:00+00:00"),
        ev.Advance(to="booking.details", rule_id="init", by="init"),
        *plan_write(state, playbook, "time", "19:00", "director"),
    ):
        state.apply(log.append(event))
    assert read_back_items(state, playbook) == ["time"]
