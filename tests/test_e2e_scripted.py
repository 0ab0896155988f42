"""Whole conversations through the Runtime with scripted models and a real loopback server.

The dental booking (issue "One turn"): greeting, details over two turns at a soft gate,
read-back at a hard gate, the caller's "yes" confirms every detail, the booking goes through
a real HTTP server on 127.0.0.1 and the call ends with outcome ``booked``. The insurance
callback (simple format) ends with ``callback_booked`` and its closing words spoken.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx
import pytest
from loopback import LoopbackServer, Reply
from superdialog_core import Playbook, Runtime, ScriptedDirector, ScriptedTalker
from superdialog_core import events as ev

ROOT = Path(__file__).resolve().parent.parent
# The shared example, verbatim: books through the clinic's HTTP API (env CLINIC_API_BASE/TOKEN).
DENTAL = ROOT / "tests" / "fixtures" / "dental_booking_http.yaml"
INSURANCE = ROOT / "playbooks" / "insurance_callback_simple.yaml"
BERLIN = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 11, 30, 10, 0, tzinfo=BERLIN)  # a Monday


def types(events: list[ev.Event]) -> list[str]:
    return [type(e).__name__ for e in events]


def assistant_lines(rt: Runtime) -> list[ev.Utterance]:
    return [e for e in rt.log if isinstance(e, ev.Utterance) and e.role == "assistant"]




async def test_dental_booking_end_to_end(clinic: LoopbackServer, client: httpx.AsyncClient) -> None:
    playbook = Playbook.load(DENTAL)
    director = ScriptedDirector([
        {"slots": {"reason": "checkup"}, "advance": "visit.details"},
        {"slots": {"patient_name": "Anna Schmidt", "phone": "0170 1234567"},
         "spans": {"patient_name": "Anna Schmidt", "phone": "0170 1234567"}},
        {"slots": {"day": "2026-12-03", "time": "10:00"}},
        {"confirm": ["patient_name", "phone", "day", "time"], "advance": "visit.book"},
    ])
    talker = ScriptedTalker([
        "Of course.",
        "May I have your name and a phone number?",
        "Thank you, Anna.",
        "Got it.",
        "So that is Anna Schmidt, 0170 1234567, Thursday the third at ten. Is that right?",
    ])
    rt = Runtime(playbook, director, talker, call_start={"clinic_id": "c1"}, now=NOW,
                 barrier_timeout=5.0, http_client=client)

    opening = await rt.start()
    assert opening.text == "Brightsmile Dental, this is Lena. How can I help?"
    assert opening.checkpoint == "visit.greet"
    assert talker.requests == []  # a verbatim opening never calls the Talker
    assert rt.state.slots["clinic_id"].status == "confirmed"
    assert rt.state.slots["clinic_id"].by == "call_start"

    turn1 = await rt.user_turn("Hi, I'd like to book a check-up")
    # (a) the soft-gate reply from snapshot N, then (d) the follow-through at the new step
    assert turn1.text == "Of course. May I have your name and a phone number?"
    assert turn1.checkpoint == "visit.details"
    assert [r.purpose for r in talker.requests] == ["reply", "follow_through"]
    assert types(turn1.events) == ["Utterance", "Utterance", "SlotWrite", "Advance", "Verdict",
                                   "Utterance"]

    turn2 = await rt.user_turn("It's Anna Schmidt, my number is 0170 1234567")
    assert turn2.text == "Thank you, Anna."
    assert turn2.checkpoint == "visit.details"
    slots = rt.state.slots
    assert (slots["patient_name"].value, slots["patient_name"].status) == ("Anna Schmidt", "provisional")
    assert (slots["phone"].value, slots["phone"].status) == ("+491701234567", "provisional")

    turn3 = await rt.user_turn("Next Thursday at ten")
    assert turn3.checkpoint == "visit.read_back"
    assert turn3.text == ("Got it. So that is Anna Schmidt, 0170 1234567, Thursday the third at "
                          "ten. Is that right?")
    advance = next(e for e in turn3.events if isinstance(e, ev.Advance))
    assert (advance.from_, advance.to, advance.rule_id, advance.by) == (
        "visit.details", "visit.read_back", "all_given", "expr")
    for key in ("patient_name", "phone", "day", "time"):
        assert rt.state.slots[key].status == "provisional", key  # before the read-back
    read_back = assistant_lines(rt)[-1]
    assert read_back.purpose == "follow_through"
    assert read_back.spoke_from_version >= rt.state.slots["time"].version

    turn4 = await rt.user_turn("Yes, that's all correct")
    assert turn4.ended and turn4.outcome == "booked" and turn4.checkpoint == "visit.done"
    assert turn4.text.startswith("You're booked, Anna Schmidt:")
    assert turn4.text.endswith("Goodbye!")
    assert turn4.interruptible is False  # the done line is interruptible: false
    for key in ("patient_name", "phone", "day", "time"):
        assert (rt.state.slots[key].status, rt.state.slots[key].by) == ("confirmed", "caller")
    assert rt.state.slots["booking_ref"].value == "A1234"
    assert rt.state.slots["booking_ref"].by == "tool"
    assert len(talker.requests) == 5  # the hard-gate turn spoke only the verbatim line
    assert types(turn4.events) == [
        "Utterance", "SlotWrite", "SlotWrite", "SlotWrite", "SlotWrite", "Advance", "Verdict",
        "ToolCall", "ToolResult", "SlotWrite", "ToolResult", "Advance", "SessionEnd", "Utterance",
    ]
    moves = [(e.to, e.rule_id, e.by) for e in turn4.events if isinstance(e, ev.Advance)]
    assert moves == [("visit.book", "confirmed", "director"), ("visit.done", "booked", "expr")]
    assert not [e for e in rt.log if isinstance(e, ev.Degraded)]

    # The server got the typed body and the bearer token, exactly once.
    (request,) = clinic.requests_to("/clinics/c1/visits", "POST")
    assert request.json == {"name": "Anna Schmidt", "phone": "+491701234567",
                            "start": "2026-12-03T10:00", "reason": "checkup"}
    assert request.header("authorization") == "Bearer t"
    assert request.header("idempotency-key")
    # The token never reaches the log.
    assert "Bearer t" not in rt.log.to_jsonl()

    # Speech integrity: Turn.text of every turn is the logged assistant speech of that turn.
    for turn in (opening, turn1, turn2, turn3, turn4):
        said = [e.text for e in turn.events if isinstance(e, ev.Utterance) and e.role == "assistant"]
        assert " ".join(said) == turn.text

    after = await rt.user_turn("Hello? Are you still there?")
    assert after.text == "" and types(after.events) == ["Utterance"]
    assert len(director.requests) == 4  # post-terminal: no Director call


async def test_dental_streamed_chunks_are_the_turn_text(clinic: LoopbackServer, client: httpx.AsyncClient) -> None:
    playbook = Playbook.load(DENTAL)
    rt = Runtime(playbook, ScriptedDirector([{"advance": "visit.details"}]),
                 ScriptedTalker(["Sure thing.", "What is your name?"]),
                 call_start={"clinic_id": "c1"}, now=NOW, http_client=client)
    opening = [chunk async for chunk in rt.stream_start()]
    assert "".join(opening) == rt.last_turn.text
    chunks = [chunk async for chunk in rt.stream_turn("I need an appointment")]
    assert "".join(chunks) == "Sure thing. What is your name?" == rt.last_turn.text
    assert len(chunks) > 2  # streamed word by word, not as one block


async def test_insurance_callback_simple_format_ends_with_closing_words() -> None:
    playbook = Playbook.load(INSURANCE)
    director = ScriptedDirector([
        {"slots": {"good_time": "yes"}, "advance": "main.interest"},
        {"slots": {"wants_quote": "yes"}, "advance": "main.slot"},
        {"slots": {"callback_day": "Tuesday", "callback_time": "3 pm"}},
    ])
    talker = ScriptedTalker([
        "Hi, this is Sam from Harbor Mutual. Is now a good time for two minutes?",
        "Great, thanks.",
        "Would you like a quote for renewing your home insurance?",
        "Lovely.",
        "Which day and time suit you for a ten-minute call with an advisor?",
        "Let me see.",
        "So an advisor will call you on Tuesday at 3 pm. Thank you, and goodbye!",
    ])
    rt = Runtime(playbook, director, talker, now=NOW)

    opening = await rt.start()
    assert opening.text.startswith("Hi, this is Sam")
    assert talker.requests[0].purpose == "opening"
    assert (await rt.user_turn("Yes, sure")).checkpoint == "main.interest"
    assert (await rt.user_turn("Yes please")).checkpoint == "main.slot"
    last = await rt.user_turn("Tuesday at 3 pm works")

    assert last.ended and last.outcome == "callback_booked" and last.checkpoint == "main.close"
    # (a) reply, (b) the exit line of the step left by the expr rule, (d) the closing segment
    assert last.text == ("Let me see. Perfect, I'll note that down. So an advisor will call you "
                         "on Tuesday at 3 pm. Thank you, and goodbye!")
    assert talker.requests[-1].purpose == "closing"
    closing = assistant_lines(rt)[-1]
    assert closing.purpose == "closing" and closing.text.endswith("goodbye!")
    assert rt.state.slots["callback_day"].value == "Tuesday"
    end = next(e for e in rt.log if isinstance(e, ev.SessionEnd))
    assert end.outcome == "callback_booked"


async def test_dental_slot_taken_then_rebooked(monkeypatch: pytest.MonkeyPatch,
                                               client: httpx.AsyncClient) -> None:
    with LoopbackServer() as server:
        server.route("POST", "/clinics/c1/visits", Reply(409, json={"error": "taken"}),
                     Reply(201, json={"ref": "B77"}))
        monkeypatch.setenv("CLINIC_API_BASE", server.base_url)
        monkeypatch.setenv("CLINIC_API_TOKEN", "t")
        director = ScriptedDirector([
            {"advance": "visit.details"},
            {"slots": {"patient_name": "Ben Ode", "phone": "+49 30 1234567",
                       "day": "2026-12-03", "time": "10:00"}},
            {"confirm": ["patient_name", "phone", "day", "time"], "advance": "visit.book"},
            {"slots": {"day": "2026-12-04", "time": "11:00"}, "advance": "visit.read_back"},
            {"confirm": ["day", "time"], "advance": "visit.book"},
        ])
        talker = ScriptedTalker([
            "Sure.", "Your name, number, day and time?", "Thanks.",
            "Ben Ode, 030 1234567, Thursday at ten. Correct?",
            "Sorry, that time was just taken. Which other day or time suits you?",
            "Let me look.", "Friday the fourth at eleven then. Is that right?",
        ])
        rt = Runtime(Playbook.load(DENTAL), director, talker, call_start={"clinic_id": "c1"},
                     now=NOW, barrier_timeout=5.0, http_client=client)
        await rt.start()
        await rt.user_turn("I need an appointment")
        await rt.user_turn("Ben Ode, +49 30 1234567, Thursday at ten")
        assert rt.state.checkpoint == "visit.read_back"

        taken = await rt.user_turn("yes")
        assert taken.checkpoint == "visit.slot_taken" and not taken.ended
        assert taken.text == "Sorry, that time was just taken. Which other day or time suits you?"
        route = [e for e in taken.events if isinstance(e, ev.Advance)][-1]
        assert (route.to, route.rule_id, route.by) == ("visit.slot_taken", "pipeline", "pipeline")

        again = await rt.user_turn("Friday at eleven")
        assert again.checkpoint == "visit.read_back"
        assert rt.state.slots["day"].status == "provisional"  # a new value needs a new read-back
        assert again.text == "Let me look. Friday the fourth at eleven then. Is that right?"

        done = await rt.user_turn("yes, perfect")
        assert done.ended and done.outcome == "booked"
        assert rt.state.slots["booking_ref"].value == "B77"
        bodies = [r.json["start"] for r in server.requests_to("/clinics/c1/visits")]
        assert bodies == ["2026-12-03T10:00", "2026-12-04T11:00"]
