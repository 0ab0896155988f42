"""Director quality rules (issue 15, SPEC §4.1, §4.3, §7): each test fails when its rule breaks.

Dates and times from the caller's words, resolved by the engine and logged; the verdict schema
narrowed to the checkpoint's slots (corrections keep a field); placeholders refused; each
slot's ``anchor`` deciding what a span miss does; ``deny`` only after a read-back; the prompt
naming the call's day, zone, region and language, and staying short.
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import jsonschema
import pytest
from superdialog_core import events as ev
from superdialog_core.log.eventlog import EventLog
from superdialog_core.log.state import ConversationState
from superdialog_core.playbook import Playbook
from superdialog_core.roles.director import (
    STABLE_END,
    build_director_request,
    stable_prompt,
    verdict_schema,
)
from superdialog_core.roles.verdict import DEFAULT_ANCHOR, anchor_mode, apply_verdict, parse_verdict
from superdialog_core.values.coerce import ValueContext
from superdialog_core.values.dates import region_order

LONDON = ZoneInfo("Europe/London")

DOC: dict[str, Any] = {
    "persona": "You are Anna at Harbor Dental.",
    "guidelines": {"timezone": "Europe/London", "language": "en-GB"},
    "policies": {"phone_region": "GB"},
    "journeys": {"dental": {"checkpoints": [
        {"id": "details", "goal": "Name and phone",
         "slots": {"patient_name": {"type": "str", "required": True},
                   "phone": {"type": "phone", "confirm": True},
                   "note": {"type": "str", "anchor": "off"}},
         "advance_when": [{"when": "caller gave name and phone", "to": "dental.visit",
                           "requires": ["patient_name", "phone"]}]},
        {"id": "visit", "goal": "Day, time and reason",
         "slots": {"date": {"type": "date", "future_only": True},
                   "time": {"type": "time"},
                   "reason": {"type": "enum", "values": ["checkup", "cleaning"]},
                   "remark": {"type": "str", "anchor": "shadow"}},
         "advance_when": [{"when": "all given", "to": "dental.done",
                           "requires": ["date", "time", "phone"]}]},
        {"id": "done", "terminal": True, "outcome": "booked", "say_verbatim": "Bye!"},
    ]}},
}


class Call:
    """A state with a log at one checkpoint; Tuesday 1 December 2026, 09:30 in London."""

    def __init__(self, checkpoint: str = "dental.details", region: str | None = "GB",
                 doc: dict[str, Any] | None = None) -> None:
        self.playbook = Playbook.model_validate(copy.deepcopy(doc or DOC))
        self.ctx = ValueContext(now=datetime(2026, 12, 1, 9, 30, tzinfo=LONDON),
                                timezone="Europe/London", phone_region=region)
        self.log = EventLog()
        self.state = ConversationState(self.playbook)
        self.emit(ev.SessionStart(session_id="s", playbook_hash="h",
                                  anchor="2026-12-01T09:30:00+00:00", timezone="Europe/London"))
        self.emit(ev.Advance(to=checkpoint, rule_id="init", by="init"))

    def emit(self, event: ev.Event) -> ev.Event:
        self.log.append(event)
        self.state.apply(event)
        return event

    def user(self, text: str) -> int:
        return self.emit(ev.Utterance(role="user", text=text)).version

    def agent(self, text: str) -> None:
        self.emit(ev.Utterance(role="assistant", text=text, kind="talker",
                               spoke_from_version=self.state.version))

    def write(self, key: str, value: Any, status: str = "provisional") -> None:
        self.emit(ev.SlotWrite(key=key, value=value, status=status, by="director"))  # type: ignore[arg-type]

    def apply(self, verdict: dict[str, Any], text: str) -> list[ev.Event]:
        version = self.user(text)
        before = self.state.version
        apply_verdict(parse_verdict(verdict), state=self.state, playbook=self.playbook,
                      value_ctx=self.ctx, user_text=text, user_version=version, emit=self.emit)
        return [e for e in self.log if e.version > before]

    def value(self, key: str) -> Any:
        slot = self.state.slots.get(key)
        return None if slot is None else slot.value


def refused(events: list[ev.Event]) -> dict[str, str]:
    return {e.key: e.message for e in events if isinstance(e, ev.SlotRefused)}


def degraded(events: list[ev.Event]) -> list[str]:
    return [e.detail for e in events if isinstance(e, ev.Degraded)]


def applied(events: list[ev.Event]) -> dict[str, Any]:
    return next(e.verdict for e in events if isinstance(e, ev.Verdict))


# --- dates and times from the caller's words (SPEC §4.1) -------------------------------------


def test_schema_takes_dates_and_times_as_words_or_iso() -> None:
    call = Call("dental.visit")
    schema = verdict_schema(call.state, call.playbook)
    for value in ({"date": "Friday next week", "time": "half past nine"},
                  {"date": "2026-12-04", "time": "09:30"}):
        jsonschema.validate({"slots": value}, schema)
    system = build_director_request(call.state, call.playbook, user_text="x").messages[0]["content"]
    assert "as the caller said them" in system and "ISO form" not in system


@pytest.mark.parametrize(("said", "date"), [
    ("tomorrow", "2026-12-02"),
    ("Friday", "2026-12-04"),
    ("the day after tomorrow", "2026-12-03"),
    ("12/01/2027", "2027-01-12"),  # day first in GB
])
def test_dates_in_words_are_resolved_by_the_engine_and_logged(said: str, date: str) -> None:
    call = Call("dental.visit")
    call.agent("Which day suits you?")
    events = call.apply({"slots": {"date": said}, "spans": {"date": said}}, f"{said} please")
    assert call.value("date") == date
    assert applied(events)["resolved"] == {"date": {"from": said, "to": date}}


def test_times_in_words_are_resolved_and_iso_is_not_logged_as_resolved() -> None:
    call = Call("dental.visit")
    events = call.apply({"slots": {"time": "3pm"}}, "3pm works")
    assert call.value("time") == "15:00"
    assert applied(events)["resolved"] == {"time": {"from": "3pm", "to": "15:00"}}
    events = call.apply({"slots": {"time": "16:00"}, "spans": {"time": "4pm"}}, "no, 4pm")
    assert call.value("time") == "16:00" and "resolved" not in applied(events)


def test_ambiguous_day_is_refused_with_a_question_without_a_region() -> None:
    call = Call("dental.visit", region=None)
    events = call.apply({"slots": {"date": "03/12"}}, "the 03/12")
    assert call.value("date") is None
    assert "more than one thing" in refused(events)["date"]
    assert "ask the caller" in refused(events)["date"]


def test_day_month_order_comes_from_the_region() -> None:
    assert region_order("GB") == "DMY" and region_order("us") == "MDY"
    assert region_order("JP") == "YMD" and region_order("CA") is None and region_order(None) is None
    us = Call("dental.visit", region="US")
    us.apply({"slots": {"date": "12/07/2027"}}, "12/07/2027")
    gb = Call("dental.visit", region="GB")
    gb.apply({"slots": {"date": "12/07/2027"}}, "12/07/2027")
    assert (us.value("date"), gb.value("date")) == ("2027-12-07", "2027-07-12")


# --- the narrowed schema (SPEC §7) -----------------------------------------------------------


def test_schema_offers_missing_then_filled_slots_of_this_checkpoint_only() -> None:
    call = Call("dental.details")
    first = verdict_schema(call.state, call.playbook)
    assert list(first["properties"]["slots"]["properties"]) == ["patient_name", "phone", "note"]
    call.write("patient_name", "Ben Carter", "accepted")
    second = verdict_schema(call.state, call.playbook)
    # the filled slot stays (a correction has a field), after the missing ones
    assert list(second["properties"]["slots"]["properties"]) == ["phone", "note", "patient_name"]
    assert second is not first and verdict_schema(call.state, call.playbook) is second
    jsonschema.validate({"slots": {"patient_name": "Ben Carver"}}, second)
    # another checkpoint's slots are never offered
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"slots": {"date": "tomorrow"}}, second)


def test_schema_keeps_a_required_slot_awaiting_confirmation_correctable() -> None:
    call = Call("dental.details")
    call.write("phone", "+447911123456")  # provisional (confirm: true)
    call.emit(ev.Advance(from_="dental.details", to="dental.visit", rule_id="x", by="director"))
    schema = verdict_schema(call.state, call.playbook)
    slots = schema["properties"]["slots"]["properties"]
    assert list(slots) == ["date", "time", "reason", "remark", "phone"]  # visit requires phone
    assert schema["properties"]["deny"]["items"] == {"enum": ["phone"]}
    call.write("patient_name", "Ben", "accepted")  # details' slot, not required at visit
    assert "patient_name" not in verdict_schema(call.state, call.playbook)["properties"]["slots"]["properties"]


# --- placeholders (SPEC §7) ------------------------------------------------------------------


@pytest.mark.parametrize("placeholder", ["John Doe", "unknown", "N/A", "not specified", "none",
                                         "Unknown.", "the caller"])
def test_placeholders_are_refused_for_str_slots(placeholder: str) -> None:
    call = Call()
    events = call.apply({"slots": {"note": placeholder}}, "I'd rather not say")
    assert call.value("note") is None
    assert "note" in refused(events) and "ask the caller" in refused(events)["note"]


def test_a_sample_name_the_caller_said_is_kept() -> None:
    call = Call()
    call.apply({"slots": {"patient_name": "John Doe"}}, "My name really is John Doe")
    assert call.value("patient_name") == "John Doe"


# --- anchor: what a span miss does (SPEC §7) -------------------------------------------------


def test_anchor_defaults_by_type() -> None:
    call = Call("dental.visit")
    specs = {k: s for cp in call.playbook.journeys["dental"].checkpoints for k, s in cp.slots.items()}
    assert anchor_mode(specs["patient_name"]) == DEFAULT_ANCHOR["str"] == "enforce"
    assert anchor_mode(specs["reason"]) == DEFAULT_ANCHOR["enum"] == "off"
    assert anchor_mode(specs["remark"]) == "shadow" and anchor_mode(specs["note"]) == "off"


def test_enforce_refuses_a_value_not_in_the_callers_words() -> None:
    call = Call()
    call.agent("This is Anna at Harbor Dental. Can I take your name?")
    events = call.apply({"slots": {"patient_name": "Anna"}, "spans": {"patient_name": "yes"}},
                        "Yes, of course")
    assert call.value("patient_name") is None
    assert "not in the caller's words" in refused(events)["patient_name"]
    call.apply({"slots": {"patient_name": "Tom Wright"}}, "Hi Anna! It's Tom Wright here.")
    assert call.value("patient_name") == "Tom Wright"


def test_enforce_traces_phones_in_spoken_digits_and_corrections_across_turns() -> None:
    call = Call()
    call.apply({"slots": {"phone": "07912 345678"}}, "oh seven nine one two, three four five, six seven eight")
    assert call.value("phone") == "+447912345678"
    events = call.apply({"slots": {"phone": "07912 999999"}}, "it's the one I gave")
    assert call.value("phone") == "+447912345678" and "phone" in refused(events)
    call.user("Ben Carter")
    call.apply({"slots": {"patient_name": "Ben Carver"}}, "Close, it's Carver, with a V")
    assert call.value("patient_name") == "Ben Carver"  # "Ben" said a turn earlier


def test_enforce_checks_an_iso_date_through_its_span() -> None:
    call = Call("dental.visit")
    events = call.apply({"slots": {"date": "2026-12-01"}}, "What time do you open?")
    assert call.value("date") is None and "date" in refused(events)  # today's date, never said
    events = call.apply({"slots": {"date": "2026-12-05"}, "spans": {"date": "Thursday"}}, "Thursday")
    assert call.value("date") is None and "date" in refused(events)  # worked out wrongly
    call.apply({"slots": {"date": "2026-12-03"}, "spans": {"date": "Thursday"}}, "Thursday")
    assert call.value("date") == "2026-12-03"


def test_shadow_writes_with_anchor_miss_and_off_skips_the_check() -> None:
    call = Call("dental.visit")
    events = call.apply({"slots": {"remark": "wheelchair access"}}, "Thursday, please")
    assert call.value("remark") == "wheelchair access" and degraded(events) == ["anchor_miss:remark"]
    call2 = Call()
    events = call2.apply({"slots": {"note": "prefers mornings"}}, "hello")
    assert call2.value("note") == "prefers mornings" and degraded(events) == []


# --- deny only after a read-back (SPEC §4.3, §7) ---------------------------------------------


def test_deny_without_a_read_back_is_dropped_with_a_degraded_event() -> None:
    call = Call()
    call.write("phone", "+447911123456")
    call.agent("Have you been to us before?")
    events = call.apply({"deny": ["phone"]}, "No, never")
    assert call.value("phone") == "+447911123456"
    assert degraded(events) == ["deny_without_read_back:phone"]
    assert "deny" not in applied(events)


def test_deny_after_a_read_back_of_that_value_clears_it() -> None:
    call = Call()
    call.write("phone", "+447911123456")
    call.agent("So that's 07911 123456?")
    events = call.apply({"deny": ["phone"]}, "No, that's wrong")
    assert call.value("phone") is None
    assert [type(e).__name__ for e in events][:1] == ["SlotClear"]


def test_deny_of_a_read_back_older_than_the_value_is_dropped() -> None:
    call = Call()
    call.agent("What's your number?")  # spoken before the value existed
    call.write("phone", "+447911123456")
    events = call.apply({"deny": ["phone"]}, "No")
    assert call.value("phone") == "+447911123456"
    assert degraded(events) == ["deny_without_read_back:phone"]


def test_deny_with_the_replacement_in_the_same_verdict_replaces() -> None:
    call = Call()
    call.write("phone", "+447911123456")
    call.agent("Anything else?")
    call.apply({"deny": ["phone"], "slots": {"phone": "07911 123465"}},
               "Oh and my number is actually 07911 123465")
    assert call.value("phone") == "+447911123465"


# --- the prompt (SPEC §7) ---------------------------------------------------------------------


def test_prompt_names_the_day_zone_region_and_language() -> None:
    call = Call("dental.visit")
    system = build_director_request(call.state, call.playbook, user_text="hi").messages[0]["content"]
    turn = system.split(STABLE_END, 1)[1]
    assert "Today is Tuesday 1 December 2026, 09:30 Europe/London." in turn
    assert "region GB" in turn and "language en-GB" in turn


def test_prompt_stays_short() -> None:
    # A local model reads every token of the prompt each turn: the fixed head stays small,
    # and empty sections (no known values, no tool results) are left out.
    call = Call("dental.visit")
    system = build_director_request(call.state, call.playbook, user_text="hi").messages[0]["content"]
    assert len(stable_prompt(call.playbook)) < 1700
    assert len(system) < 2600
    assert "Known values" not in system and "Tool results" not in system


def test_a_bare_day_of_month_that_has_passed_is_next_month() -> None:
    from superdialog_core.playbook import SlotSpec
    from superdialog_core.values.coerce import coerce

    ctx = ValueContext(now=datetime(2026, 11, 30, 10, 0, tzinfo=LONDON), timezone="Europe/London",
                       phone_region="GB")
    assert coerce("date", SlotSpec(type="date"), "the 2nd", ctx) == "2026-12-02"
    assert coerce("date", SlotSpec(type="date"), "on the 30th", ctx) == "2026-11-30"


def test_todays_date_is_not_traced_to_a_lone_word() -> None:
    # dateparser reads "a" as today: the engine must not take that as the caller's words
    call = Call("dental.visit")
    events = call.apply({"slots": {"date": "2026-12-01"}}, "I'd like a check-up.")
    assert call.value("date") is None and "date" in refused(events)


def test_a_catch_all_enum_value_must_have_been_said() -> None:
    doc = copy.deepcopy(DOC)
    doc["journeys"]["dental"]["checkpoints"][1]["slots"]["reason"]["values"].append("other")
    call = Call("dental.visit", doc=doc)
    events = call.apply({"slots": {"reason": "other", "date": "Friday"}}, "Friday, please")
    assert call.value("reason") is None and "reason" in refused(events)
    assert call.value("date") == "2026-12-04"
    call.apply({"slots": {"reason": "cleaning"}}, "a scale and polish")  # a mapping: off
    assert call.value("reason") == "cleaning"
    call.apply({"slots": {"reason": "other"}}, "it's something else really")
    assert call.value("reason") == "other"


def test_a_part_of_the_day_is_no_evidence_for_todays_date() -> None:
    call = Call("dental.visit")
    events = call.apply({"slots": {"date": "2026-12-01", "time": "16:45"}},
                        "About quarter to five in the afternoon.")
    assert call.value("date") is None and "date" in refused(events)
    assert call.value("time") == "16:45"
    call.apply({"slots": {"date": "2026-12-01"}}, "Could you fit me in today?")
    assert call.value("date") == "2026-12-01"


def test_a_free_text_slot_may_hold_a_clock_reading_the_caller_said_in_words() -> None:
    from superdialog_core.values.evidence import CallerWords, in_callers_words

    heard = CallerWords(["Tuesday at ten, please"])
    assert in_callers_words("str", "10:00", heard)
    assert not in_callers_words("str", "11:00", heard)


def test_looking_for_a_date_in_a_long_line_is_bounded() -> None:
    # Each phrase tried is a date-parser call on the event loop: a long line without a date
    # word costs none in English, and any line costs at most MAX_PHRASES.
    from superdialog_core.roles.verdict import MAX_PHRASES, _phrases

    chatter = " ".join(["well", "actually", "honestly", "because", "whatever"] * 8)
    assert _phrases(chatter) == []
    long_line = chatter + " next Friday at 10 " + chatter
    phrases = _phrases(long_line)
    assert 0 < len(phrases) <= MAX_PHRASES
    assert any("Friday" in p for p in phrases)
    assert len(_phrases(chatter, "de")) == MAX_PHRASES  # other languages: only the cap
