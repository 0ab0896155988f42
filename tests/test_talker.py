"""Talker view (SPEC §8) and the never_say stream filter."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from superdialog_core import events as ev
from superdialog_core.lang.expr import compile_expr
from superdialog_core.log.eventlog import EventLog
from superdialog_core.log.state import ConversationState
from superdialog_core.playbook import Playbook
from superdialog_core.roles.talker import (
    PLACEHOLDER,
    NeverSayFilter,
    build_talker_request,
    estimate_tokens,
)

SECRET = "sk-secret-123"

DOC: dict[str, Any] = {
    "persona": "You are Maya, the reservations host at Trattoria Verde.",
    "env": {"API_KEY": SECRET},
    "views": {"party_label": "slots.party_size", "nothing": "slots.remark"},
    "journeys": {"booking": {"checkpoints": [
        {"id": "collect", "goal": "Have party size, date and time", "gate": "hard",
         "guidance": "We know {{ slots.party_size|default('?') }} guests.",
         "never_say": ["fully booked", "cheap"],
         "slots": {
             "party_size": {"type": "int", "required": True},
             "date": {"type": "date", "required": True},
             "time": {"type": "time", "required": True},
             "remark": {"type": "str"},
             "phone": {"type": "phone"},
         },
         "advance_when": [{"when": "all given", "to": "booking.done",
                           "requires": ["party_size", "date", "time", "phone"]}]},
        {"id": "done", "terminal": True, "outcome": "booked"},
    ]}},
}


class Call:
    def __init__(self, *, loader: bool = True, doc: dict[str, Any] | None = None) -> None:
        doc = copy.deepcopy(doc or DOC)
        self.playbook = Playbook.from_dict(doc) if loader else Playbook.model_validate(doc)
        self.log = EventLog()
        self.state = ConversationState(self.playbook)
        self.emit(ev.SessionStart(session_id="s1", playbook_hash="h",
                                  anchor="2026-11-30T10:15:00+01:00", timezone="Europe/Berlin"))
        self.emit(ev.Advance(to="booking.collect", rule_id="init", by="init"))

    def emit(self, event: ev.Event) -> ev.Event:
        self.log.append(event)
        self.state.apply(event)
        return event

    def say(self, role: str, text: str, **kw: Any) -> int:
        if role == "assistant":
            kw.setdefault("kind", "talker")
            kw.setdefault("spoke_from_version", self.state.version)
        return self.emit(ev.Utterance(role=role, text=text, **kw)).version  # type: ignore[arg-type]

    def request(self, purpose: str = "reply", **kw: Any) -> Any:
        return build_talker_request(self.state, self.playbook, purpose=purpose, **kw)


def system_of(request: Any) -> str:
    assert request.messages[0]["role"] == "system"
    return request.messages[0]["content"]


# --- the view ------------------------------------------------------------------------------


def test_system_message_has_every_block_in_order() -> None:
    call = Call()
    call.emit(ev.SlotWrite(key="party_size", value=4, status="provisional", by="director"))
    call.emit(ev.SlotRefused(key="time", value="25:00", message="time: that is not a time; ask again"))
    call.emit(ev.SteeringNote(text="Caller is in a hurry.", kind="steer"))
    call.say("user", "four of us")
    system = system_of(call.request("follow_through"))
    order = [
        "You are Maya, the reservations host",
        "short spoken sentences",
        "Today is Monday 30 November 2026, 10:15 Europe/Berlin.",
        "## Current step",
        "Goal: Have party size, date and time",
        "We know 4 guests.",
        "Still needed: date, time",
        "Read back and confirm: party_size: 4.",
        "time: that is not a time; ask again",
        "- Caller is in a hurry.",
        "Never say: fully booked; cheap",
        "## Known information\n- party_size: 4 (not yet confirmed)",
        "## Reference data\n- party_label: 4",
        "We just moved to this step: speak now.",
    ]
    positions = [system.find(part) for part in order]
    assert -1 not in positions, [p for p, i in zip(order, positions, strict=True) if i == -1]
    assert positions == sorted(positions)
    assert "nothing" not in system  # a view that is None is left out


def test_env_never_reaches_the_talker_even_if_the_scope_carries_it() -> None:
    # The loader refuses env in speech templates; a playbook built from the models directly
    # is not checked, so the view drops env from whatever scope it is given.
    doc = copy.deepcopy(DOC)
    doc["journeys"]["booking"]["checkpoints"][0]["guidance"] = "Key: {{ env.API_KEY }}."
    call = Call(loader=False, doc=doc)
    scope = {**call.state.scope(), "env": {"API_KEY": SECRET}}
    request = call.request(views_scope=scope)
    assert all(SECRET not in m["content"] for m in request.messages)
    assert "Key: ." in system_of(request)  # the env reference rendered empty


def test_read_back_items_use_spoken_forms_and_confirmed_values_are_not_marked() -> None:
    call = Call()
    call.emit(ev.SlotWrite(key="date", value="2026-12-01", status="provisional", by="director"))
    call.emit(ev.SlotWrite(key="party_size", value=4, status="confirmed", by="caller"))
    call.emit(ev.SlotWrite(key="phone", value="+4930123456", status="provisional", by="director"))
    system = system_of(call.request())
    assert ("Read back and confirm: date: Tuesday, December 1; phone: plus 4 9 3, 0 1 2, 3 4 5 "
            "6. Read these back to the caller in one sentence and ask whether they are right."
            ) in system
    assert "- party_size: 4\n" in system + "\n" and "- party_size: 4 (not" not in system
    assert "- date: Tuesday, December 1 (not yet confirmed)" in system
    assert "- phone: +4930123456 (not yet confirmed)" in system


def test_every_queued_note_is_shown_oldest_first_with_repairs_labelled() -> None:
    call = Call()
    call.emit(ev.SteeringNote(text="First note.", kind="steer"))
    call.emit(ev.SteeringNote(text="You asked for the date again; it is known.", kind="repair"))
    call.emit(ev.SteeringNote(text="Third note.", kind="steer"))
    system = system_of(call.request())
    block = system[system.index("Notes from the supervisor"):]
    lines = block.split("\n\n")[0].splitlines()[1:]
    assert lines == ["- First note.", "- Correction: You asked for the date again; it is known.",
                     "- Third note."]


def test_purpose_lines_and_unknown_purpose() -> None:
    call = Call()
    assert "greet the caller" in system_of(call.request("opening"))
    assert "brief, warm close" in system_of(call.request("closing"))
    reply = system_of(call.request("reply"))
    assert "greet the caller" not in reply and "speak now" not in reply
    with pytest.raises(ValueError, match="opening, reply, follow_through, closing"):
        call.request("chitchat")


def test_transcript_uses_heard_text_and_starts_with_a_user_message() -> None:
    call = Call()
    version = call.say("assistant", "Hello! How many guests will there be tonight?")
    call.emit(ev.SpeechCorrection(utterance_version=version, heard_text="Hello! How many"))
    call.say("user", "four")
    call.say("assistant", "Great.")
    call.say("assistant", "What day?")
    request = call.request()
    assert request.messages[1:] == [
        {"role": "user", "content": PLACEHOLDER},
        {"role": "assistant", "content": "Hello! How many"},
        {"role": "user", "content": "four"},
        {"role": "assistant", "content": "Great. What day?"},
    ]
    assert request.spoke_from_version == call.state.version
    assert request.purpose == "reply"


def test_opening_has_only_the_placeholder() -> None:
    request = Call().request("opening")
    assert request.messages[1:] == [{"role": "user", "content": PLACEHOLDER}]


def test_packing_keeps_the_newest_entries_within_the_budget() -> None:
    call = Call()
    for i in range(40):
        call.say("user", f"user line {i} " + "x" * 200)
        call.say("assistant", f"assistant line {i} " + "y" * 200)
    budget = 1000
    request = call.request(token_budget=budget)
    messages = request.messages
    assert messages[-1]["content"].startswith("assistant line 39")
    total = sum(estimate_tokens(m["content"]) + 4 for m in messages if m["content"] != PLACEHOLDER)
    assert total <= budget
    kept = [m for m in messages[1:] if m["content"] != PLACEHOLDER]
    assert 2 < len(kept) < 80
    # A contiguous newest suffix: nothing skipped in the middle.
    numbers = [int(m["content"].split()[2]) for m in kept]
    assert numbers == sorted(numbers) and numbers[-1] == 39
    assert messages[1]["role"] == "user"
    # As many as fit: the next older entry would have broken the budget.
    first = kept[0]["content"]
    older = (f"assistant line {numbers[0] - 1} " + "y" * 200 if first.startswith("user")
             else f"user line {numbers[0]} " + "x" * 200)
    assert total + estimate_tokens(older) + 4 > budget


def test_the_newest_entry_is_kept_even_when_it_alone_exceeds_the_budget() -> None:
    call = Call()
    call.say("user", "older")
    call.say("user", "z" * 3900)  # under policies.caps.model_chars
    request = call.request(token_budget=50)
    assert request.messages[1:] == [{"role": "user", "content": "z" * 3900}]


def test_guidance_of_a_playbook_built_without_the_loader_is_compiled_once() -> None:
    call = Call(loader=False)
    checkpoint = call.playbook.checkpoint("booking.collect")
    assert checkpoint._guidance is None
    system = system_of(call.request())
    assert "We know ? guests." in system and "{{" not in system
    template = checkpoint._guidance
    assert template is not None
    call.request()
    assert checkpoint._guidance is template


# --- never_say -----------------------------------------------------------------------------

TEXT = "Sorry, we are fully booked tonight. But I can check tomorrow! What name?"
CUT = "Sorry, we are But I can check tomorrow! What name?"


def run(chunks: list[str], phrases: list[str]) -> list[str]:
    f = NeverSayFilter(phrases)
    return [*(f.feed(c) for c in chunks), f.close()]


def test_without_phrases_chunks_pass_unchanged_with_no_delay() -> None:
    f = NeverSayFilter([])
    assert f.feed("Hel") == "Hel"
    assert f.feed("lo") == "lo"
    assert f.close() == ""


def test_hold_back_is_at_most_the_longest_phrase_minus_one() -> None:
    f = NeverSayFilter(["fully booked", "cheap"])
    assert f.hold_max == len("fully booked") - 1
    # The whole tail could still become "fully booked": exactly 11 characters held.
    assert f.feed("x" * 50 + "fully booke") == "x" * 50
    assert f.close() == "fully booke"
    g = NeverSayFilter(["fully booked", "cheap"])
    assert g.feed("Hello there") == "Hello there"  # no phrase can start here: nothing held
    assert g.feed(" it is chea") == " it is "  # only the possible start is held
    assert g.feed("t sheet.") == "cheat sheet."  # not a phrase after all: released


def test_cut_phrase_and_rest_of_sentence_in_one_chunk() -> None:
    assert "".join(run([TEXT], ["fully booked"])) == CUT


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 11, 13])
def test_cut_across_chunk_boundaries(size: int) -> None:
    chunks = [TEXT[i:i + size] for i in range(0, len(TEXT), size)]
    assert "".join(run(chunks, ["fully booked"])) == CUT


def test_matching_is_case_insensitive() -> None:
    assert "".join(run(["Sorry, we are FULLY Booked tonight. But"], ["fully booked"])) == (
        "Sorry, we are But")


def test_phrase_in_an_unfinished_last_sentence_is_cut_at_close() -> None:
    assert "".join(run(["Okay. We are fully", " booked and"], ["fully booked"])) == "Okay. We are "


def test_a_space_is_kept_across_a_cut_sentence() -> None:
    assert "".join(run(["Great.Fully booked today. Next?"], ["fully booked"])) == "Great. Next?"


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list("ab .!fulybokedFULY")), max_size=80),
    cuts=st.lists(st.integers(min_value=0, max_value=80), max_size=10),
)
def test_filter_is_chunking_invariant_and_never_speaks_a_phrase(text: str, cuts: list[int]) -> None:
    phrases = ["fully booked", "boo"]
    points = sorted({c for c in cuts if c <= len(text)})
    chunks = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    f = NeverSayFilter(phrases)
    pieces = [f.feed(c) for c in chunks]
    # What was returned is never taken back: the final text is the pieces, in order.
    whole = "".join([*pieces, f.close()])
    assert whole == "".join(run([text], phrases))
    assert "boo" not in whole.lower() and "fully booked" not in whole.lower()


def test_a_denied_value_is_asked_again_not_read_back() -> None:
    call = Call()
    call.emit(ev.SlotWrite(key="date", value="2026-12-01", status="provisional", by="director"))
    call.emit(ev.SlotClear(key="date", reason="denied"))
    system = system_of(call.request())
    assert ("Still needed: party_size, date (the caller said the last value was wrong; ask "
            "again), time") in system
    assert "Read back and confirm" not in system and "None" not in system


def test_views_with_structured_values_are_shown_as_json() -> None:
    call = Call()
    call.playbook._views["free"] = compile_expr("results.availability.data")
    call.emit(ev.ToolResult(tool="availability", ok=True, status=200,
                            data={"times": ["19:00", "20:30"]}, store_as="availability"))
    call.emit(ev.SlotWrite(key="remark", value="window seat", status="accepted", by="director"))
    system = system_of(call.request())
    assert '- nothing: window seat\n- free: {"times": ["19:00", "20:30"]}' in system


def test_tone_and_language_come_from_the_guidelines() -> None:
    assert "Tone: professional." in system_of(Call().request())
    assert "Speak " not in system_of(Call().request())
    doc = copy.deepcopy(DOC)
    doc["guidelines"] = {"tone": "casual", "language": "de"}
    system = system_of(Call(doc=doc).request())
    assert "Tone: casual. Speak de." in system
