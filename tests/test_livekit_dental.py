"""The shared dental example end to end through a real AgentSession in text mode (no server).

Twice: (a) with scripted Talker/Director written as real ``llm.LLM`` subclasses, (b) with
``livekit.plugins.openai.LLM(base_url=...)`` for both roles against a fake OpenAI-compatible
server. The booking goes to a real loopback HTTP server (CLINIC_API_BASE), the call-start
values come from dispatch metadata through ``fake_job_context``, and the call must reach
``booked``, speak the non-interruptible confirmation and end the session.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from livekit.agents import AgentSession
from livekit.agents.testing import fake_job_context
from livekit.plugins import openai
from superdialog_core import Playbook
from superdialog_core.events import SlotWrite, ToolCall, Utterance

from superdialog_livekit import DialogAgent, DialogMachineLLM, call_start_from_job
from tests.fake_openai_server import FakeOpenAIServer
from tests.livekit_scripted import DirectorLLM, TalkerLLM
from tests.loopback import LoopbackServer, Reply
from tests.paths import EXAMPLES as EXAMPLES_DIR

EXAMPLE = EXAMPLES_DIR / "dental_booking.yaml"
NOW = datetime(2026, 12, 1, 9, 30, tzinfo=ZoneInfo("Europe/Berlin"))
# The hard gates wait for the decision (and the booking call) before speaking; a generous
# barrier keeps a loaded test machine from turning that wait into the filler line.

TALKER_SCRIPT = [
    "Of course.",                                   # turn 1, soft gate reply
    "May I have your name, phone and a day?",        # turn 1, follow-through at details
    "Thank you.",                                   # turn 2, soft gate reply
    "Anna Schmidt, +49 151 12345678, Tuesday 8 December at 10:00. Is that right?",  # read-back
]
DIRECTOR_SCRIPT: list[Any] = [
    {"advance": "visit.details"},
    {"slots": {"patient_name": "Anna Schmidt", "phone": "+4915112345678",
               "day": "2026-12-08", "time": "10:00", "reason": "checkup"}},
    {"confirm": ["patient_name", "phone", "day", "time"], "advance": "visit.book"},
]


@pytest.fixture
def clinic(monkeypatch: pytest.MonkeyPatch) -> Any:
    with LoopbackServer() as server:
        server.route("POST", "/clinics/berlin-1/visits", Reply(201, json={"ref": "482913"}))
        monkeypatch.setenv("CLINIC_API_BASE", server.url(""))
        monkeypatch.setenv("CLINIC_API_TOKEN", "tok-123")
        yield server


def _call_start(playbook: Playbook) -> dict[str, Any]:
    with fake_job_context(job_metadata=json.dumps({"call_start": {"clinic_id": "berlin-1"}})) as ctx:
        return call_start_from_job(ctx, playbook)


async def _run_booking(dialog: DialogMachineLLM) -> tuple[list[str], list[Any]]:
    """Drive the three caller turns; returns the assistant texts and the speech handles."""
    handles: list[Any] = []
    closed = asyncio.get_running_loop().create_future()
    session = AgentSession(llm=dialog, vad=None, turn_handling={"turn_detection": None})
    session.on("speech_created", lambda ev: handles.append(ev.speech_handle))
    session.on("close", lambda ev: closed.done() or closed.set_result(ev))
    await session.start(DialogAgent(dialog))
    try:
        replies = []
        result = await session.run(user_input="Hi, I'd like to book a check-up.")
        result.expect.next_event().is_message(role="assistant")
        result.expect.no_more_events()
        replies.append(result.events[0].item.text_content)

        result = await session.run(
            user_input="Anna Schmidt, 0151 12345678, next Tuesday at ten, just a check-up.")
        result.expect.next_event().is_message(role="assistant")
        replies.append(result.events[0].item.text_content)

        result = await session.run(user_input="Yes, that's all correct.")
        result.expect.next_event().is_message(role="assistant")
        result.expect.no_more_events()
        replies.append(result.events[0].item.text_content)
        await asyncio.wait_for(closed, 5.0)  # the terminal line played: the session ends
    finally:
        await session.aclose()
    opening = next(i.text_content for i in session.history.items
               if i.type == "message" and i.role == "assistant")
    return [opening, *replies], handles


def _check_booked(dialog: DialogMachineLLM, texts: list[str], handles: list[Any], clinic: Any) -> None:
    assert texts[0] == "Brightsmile Dental, this is Lena. How can I help?"
    assert texts[1] == "Of course. May I have your name, phone and a day?"
    assert texts[2].startswith("Thank you. Anna Schmidt")
    assert texts[3].startswith("You're booked, Anna Schmidt:")
    assert "Goodbye!" in texts[3]
    rt = dialog.runtime
    assert rt.state.ended and rt.state.outcome == "booked"
    assert rt.state.slots["booking_ref"].value == "482913"
    assert {k: s.status for k, s in rt.state.slots.items() if k in ("patient_name", "day")} == {
        "patient_name": "confirmed", "day": "confirmed"}
    assert rt.state.slots["clinic_id"].by == "call_start"
    sent = clinic.requests[0]
    assert sent.header("authorization") == "Bearer tok-123"
    assert sent.json == {"name": "Anna Schmidt", "phone": "+4915112345678",
                         "start": "2026-12-08T10:00", "reason": "checkup"}
    # Every user message logged exactly once, in order.
    users = [e.text for e in rt.log if isinstance(e, Utterance) and e.role == "user"]
    assert len(users) == 3 and users[0].startswith("Hi, I'd like")
    assert any(isinstance(e, ToolCall) for e in rt.log)
    assert any(isinstance(e, SlotWrite) and e.by == "caller" for e in rt.log)
    # Every assistant message LiveKit made is mapped to the utterances it spoke.
    spoken = {v for vs in dialog.speech.ledger.message_versions.values() for v in vs}
    assert spoken == {e.version for e in rt.log if isinstance(e, Utterance) and e.role == "assistant"}
    # The confirmation line is interruptible: false: its speech handle disallowed interruptions.
    assert handles[-1].allow_interruptions is False
    assert handles[0].allow_interruptions is True


async def test_dental_booking_with_scripted_livekit_llms(clinic: Any) -> None:
    playbook = Playbook.load(EXAMPLE)
    talker = TalkerLLM(TALKER_SCRIPT)
    director = DirectorLLM(DIRECTOR_SCRIPT)
    dialog = DialogMachineLLM(playbook, talker=talker, director=director,
                              call_start=_call_start(playbook), now=NOW, barrier_timeout=30.0)
    events: list[str] = []
    dialog.on("superdialog_event", lambda ev: events.append(ev.kind))
    texts, handles = await _run_booking(dialog)
    _check_booked(dialog, texts, handles, clinic)
    # The Director was asked through the forced record_verdict tool, three times.
    assert director.tool_choices == [{"type": "function", "function": {"name": "record_verdict"}}] * 3
    assert [t.id for t in director.tools[0]] == ["record_verdict"]
    assert {"verdict", "advance", "slot_write", "director_call", "ended"} <= set(events)


async def test_dental_booking_with_the_openai_plugin_against_a_fake_server(clinic: Any) -> None:
    playbook = Playbook.load(EXAMPLE)
    async with FakeOpenAIServer(talker=TALKER_SCRIPT, director=DIRECTOR_SCRIPT) as server:
        talker = openai.LLM(model="talker-model", base_url=server.base_url, api_key="test")
        director = openai.LLM(model="director-model", base_url=server.base_url, api_key="test")
        dialog = DialogMachineLLM(playbook, talker=talker, director=director,
                                  call_start=_call_start(playbook), now=NOW, barrier_timeout=3.0)
        texts, handles = await _run_booking(dialog)
    _check_booked(dialog, texts, handles, clinic)
    assert [r["model"] for r in server.director_requests] == ["director-model"] * 3
    assert all(r["tool_choice"] == {"type": "function", "function": {"name": "record_verdict"}}
               for r in server.director_requests)
    assert len(server.talker_requests) == 4
    assert all(r["model"] == "talker-model" and "tools" not in r for r in server.talker_requests)
