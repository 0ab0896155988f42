"""LiveKit habits through DialogMachineLLM (issue 13, SPEC §10), each as a LiveKit user writes it.

A real ``AgentSession`` in text mode (``session.run``, ``result.expect``), real
``openai.LLM(base_url=...)`` clients against ``tests/fake_openai_server.py`` on 127.0.0.1:
function tools the Talker calls, ``generate_reply(instructions=...)``, ``session.say``, a handoff
round trip, loud model failures (``policies.model_failure``, ``on_talker_error="raise"`` inside a
``FallbackAdapter``), and the Director's usage in the session's usage.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import pytest
from livekit.agents import Agent, AgentSession, function_tool, llm
from livekit.plugins import openai
from superdialog_core import Playbook
from superdialog_core.events import (
    Degraded,
    FunctionCall,
    FunctionResult,
    SteeringNote,
    Utterance,
    Verdict,
)

from superdialog_livekit import DialogAgent, DialogMachineLLM
from superdialog_livekit.llm import DIRECTOR_METRICS_LABEL
from tests.fake_openai_server import CallTool, FakeOpenAIServer, tool_names

PLAYBOOK = """
persona: "You take table bookings for Chez Ada."
journeys:
  main:
    checkpoints:
      - id: ask
        say_verbatim: "Welcome to Chez Ada! How many are you?"
        goal: "Find out how many people are coming"
        slots:
          party_size: {type: int, required: true}
        advance_when:
          - {id: got, when: "slots.party_size", judge: expr, to: main.confirm}
      - id: confirm
        goal: "The caller confirms the party size"
        advance_when:
          - {id: yes, when: "the caller confirms", judge: llm, to: main.done}
      - id: done
        say_verbatim: "Booked for {{ slots.party_size }}. Goodbye!"
        terminal: true
        outcome: booked
      - id: failed
        say_verbatim: "Please call us back later. Goodbye."
        terminal: true
        outcome: technical_failure
"""

OPENING = "Welcome to Chez Ada! How many are you?"


@pytest.fixture
def playbook() -> Playbook:
    return Playbook.from_yaml(PLAYBOOK)


def _client(server: FakeOpenAIServer | str, model: str) -> openai.LLM:
    base_url = server if isinstance(server, str) else server.base_url
    return openai.LLM(model=model, base_url=base_url, api_key="test")


def _dead_endpoint() -> str:
    """An OpenAI-compatible URL on 127.0.0.1 where nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _session(llm_: Any, **kwargs: Any) -> AgentSession:
    return AgentSession(llm=llm_, vad=None, turn_handling={"turn_detection": None}, **kwargs)


def _messages(session: AgentSession) -> list[tuple[str, str]]:
    return [(i.role, i.text_content or "") for i in session.history.items if i.type == "message"]


async def _until(predicate: Any, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


def _said(rt: Any, **match: Any) -> list[Utterance]:
    return [e for e in rt.log if isinstance(e, Utterance)
            and all(getattr(e, k) == v for k, v in match.items())]


# --- 1. function tools ---------------------------------------------------------------------


class HoursAgent(DialogAgent):
    def __init__(self, dialog: DialogMachineLLM) -> None:
        super().__init__(dialog, on_end="none")
        self.asked: list[str] = []

    @function_tool
    async def opening_hours(self, day: str) -> str:
        """The restaurant's opening hours on one day.

        Args:
            day: the weekday, e.g. Monday
        """
        self.asked.append(day)
        return f"open 12:00 to 22:00 on {day}"


def _from_tool_output(body: dict[str, Any]) -> str:
    outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    return f"We are {outputs[-1]}." if outputs else "I do not know."


async def test_the_talker_calls_an_agent_function_tool_and_livekit_runs_it(
    playbook: Playbook,
) -> None:
    async with FakeOpenAIServer(
        talker=[CallTool("opening_hours", {"day": "Monday"}, text="Let me check."),
                _from_tool_output],
        director=[{}],
    ) as server:
        dialog = DialogMachineLLM(playbook, talker=_client(server, "talker"),
                                  director=_client(server, "director"))
        agent = HoursAgent(dialog)
        async with _session(dialog) as session:
            await session.start(agent)
            await _until(lambda: _messages(session))
            result = await session.run(user_input="Are you open on Monday?")
            result.expect.contains_function_call(name="opening_hours",
                                                 arguments={"day": "Monday"})
            result.expect.contains_function_call_output(output="open 12:00 to 22:00 on Monday")
            result.expect.contains_message(role="assistant")
            said = " ".join(e.item.text_content for e in result.events if e.type == "message")
            assert "We are open 12:00 to 22:00 on Monday." in said
            assert agent.asked == ["Monday"]  # LiveKit ran the tool
            rt = dialog.runtime
            await rt.wait_idle()
        # The tools were offered to the Talker both times; the continuation (after the
        # result) was one more Talker segment of the same turn, with no Director call.
        assert [tool_names(b) for b in server.talker_requests] == [["opening_hours"]] * 2
        assert len(server.director_requests) == 1
    calls = [e for e in rt.log if isinstance(e, FunctionCall)]
    results = [e for e in rt.log if isinstance(e, FunctionResult)]
    assert [(c.name, c.arguments) for c in calls] == [("opening_hours", '{"day": "Monday"}')]
    assert [(r.call_id, r.output, r.is_error) for r in results] == [
        (calls[0].call_id, "open 12:00 to 22:00 on Monday", False)]
    talker = _said(rt, role="assistant", kind="talker")
    assert [u.text for u in talker] == ["Let me check.", "We are open 12:00 to 22:00 on Monday."]
    assert rt.state.results == {} and "opening_hours" not in rt.state.calls  # not playbook tools
    assert not [e for e in rt.log if isinstance(e, Degraded) and e.component == "talker"]


# --- 2. generate_reply(instructions=...) ---------------------------------------------------


async def test_generate_reply_with_instructions_is_one_steered_talker_segment(
    playbook: Playbook,
) -> None:
    async with FakeOpenAIServer(talker=["Tonight we have lobster!", "Lovely, four then."],
                                director=[{"slots": {"party_size": 4}}]) as server:
        dialog = DialogMachineLLM(playbook, talker=_client(server, "talker"),
                                  director=_client(server, "director"))
        async with _session(dialog) as session:
            await session.start(DialogAgent(dialog, on_end="none"))
            await _until(lambda: _messages(session))
            await session.generate_reply(instructions="Tell the caller about tonight's special: lobster.")
            assert _messages(session)[-1] == ("assistant", "Tonight we have lobster!")
            assert len(server.director_requests) == 0  # no caller words: no Director call
            system = server.talker_requests[0]["messages"][0]["content"]
            assert "Instructions for this reply" in system
            assert "tonight's special: lobster" in system
            # generate_reply(user_input=...) stays a normal turn.
            await session.generate_reply(user_input="four of us")
            rt = dialog.runtime
            await rt.wait_idle()
            assert len(server.director_requests) == 1
            assert rt.state.slots["party_size"].value == 4
    notes = [e for e in rt.log if isinstance(e, SteeringNote)]
    assert [(n.kind, n.text) for n in notes] == [
        ("instruction", "Tell the caller about tonight's special: lobster.")]
    steered = _said(rt, role="assistant", text="Tonight we have lobster!")
    assert len(steered) == 1 and steered[0].kind == "talker" and steered[0].version > notes[0].version
    assert not rt.state.pending_notes  # shown to that segment, then consumed


# --- 3. session.say --------------------------------------------------------------------------


async def test_session_say_is_logged_once_and_the_talker_knows_it_was_said(
    playbook: Playbook,
) -> None:
    line = "Our lines are busy tonight, thanks for waiting."
    async with FakeOpenAIServer(talker=["Two, wonderful."],
                                director=[{"slots": {"party_size": 2}}, {}]) as server:
        dialog = DialogMachineLLM(playbook, talker=_client(server, "talker"),
                                  director=_client(server, "director"))
        async with _session(dialog) as session:
            await session.start(DialogAgent(dialog, on_end="none"))
            await _until(lambda: _messages(session))
            await session.say(line)
            result = await session.run(user_input="two of us")
            result.expect.contains_message(role="assistant")
            await session.run(user_input="yes that's right")
            rt = dialog.runtime
            await rt.wait_idle()
        said = _said(rt, role="assistant", text=line)
        assert [(u.kind, u.agent) for u in said] == [("say", None)]  # once, though seen 3 times
        first = server.talker_requests[0]["messages"]
        assert any(m["role"] == "assistant" and line in m["content"] for m in first)


# --- 4. a handoff round trip -------------------------------------------------------------------


class InfoAgent(Agent):
    """Another agent of the app, with its own LLM; hands the caller back to the booking."""

    def __init__(self, dialog: DialogMachineLLM, info_llm: llm.LLM, chat_ctx: Any) -> None:
        super().__init__(instructions="You answer questions about the restaurant.",
                         llm=info_llm, chat_ctx=chat_ctx)
        self.dialog = dialog
        self.info_llm = info_llm

    async def on_enter(self) -> None:
        self.session.generate_reply()

    @function_tool
    async def back_to_booking(self) -> Agent:
        """The caller wants to go on with the booking."""
        return BookingAgent(self.dialog, self.info_llm, chat_ctx=self.chat_ctx)


class BookingAgent(DialogAgent):
    def __init__(self, dialog: DialogMachineLLM, info_llm: llm.LLM, *,
                 chat_ctx: Any = None) -> None:
        options = {"chat_ctx": chat_ctx} if chat_ctx is not None else {}
        super().__init__(dialog, on_end="none", **options)
        self.info_llm = info_llm

    @function_tool
    async def restaurant_question(self) -> Agent:
        """The caller asks about the restaurant (parking, wifi, the menu)."""
        return InfoAgent(self.dialog, self.info_llm, chat_ctx=self.chat_ctx)


async def test_a_handoff_round_trip_costs_one_director_call_for_the_returning_turn(
    playbook: Playbook,
) -> None:
    async with FakeOpenAIServer(
        talker=["Sure, for how many people?", CallTool("restaurant_question"),
                "Welcome back! How many of you?", "Four, lovely. Is that right?"],
        director=[{}, {}, {}, {"slots": {"party_size": 4}}], director_delay=0.3,
    ) as main, FakeOpenAIServer(
        talker=["Parking is free behind the building.", "Yes, free wifi too.",
                CallTool("back_to_booking", call_id="call_back")],
    ) as info:
        dialog = DialogMachineLLM(playbook, talker=_client(main, "talker"),
                                  director=_client(main, "director"))
        info_llm = _client(info, "info")
        async with _session(dialog) as session:
            await session.start(BookingAgent(dialog, info_llm))
            await _until(lambda: _messages(session))
            await session.run(user_input="Hi, I'd like a table")
            result = await session.run(user_input="Is there parking nearby?")
            result.expect.contains_function_call(name="restaurant_question")
            await _until(lambda: ("assistant", "Parking is free behind the building.")
                         in _messages(session))
            await session.run(user_input="And is there wifi?")
            await session.run(user_input="OK, back to my booking")
            await _until(lambda: ("assistant", "Welcome back! How many of you?")
                         in _messages(session))
            await session.run(user_input="Four of us")
            rt = dialog.runtime
            await rt.wait_idle()
        # Four Director calls: the three turns this playbook answered and one for the
        # returning turn; the other agent's turns were never re-judged one by one.
        assert len(main.director_requests) == 4
        returning = main.director_requests[2]["messages"][1]["content"]
        assert 'caller (to info_agent): "And is there wifi?"' in returning
        assert 'info_agent: "Yes, free wifi too."' in returning
    other = [(u.role, u.text) for u in rt.log if isinstance(u, Utterance) and u.agent == "info_agent"]
    assert other == [
        ("assistant", "Parking is free behind the building."),
        ("user", "And is there wifi?"),
        ("assistant", "Yes, free wifi too."),
        ("user", "OK, back to my booking"),
    ]
    assert all(u.kind == "other_agent" for u in _said(rt, role="assistant", agent="info_agent"))
    # The returning reply did not wait for that Director call.
    back = _said(rt, role="assistant", text="Welcome back! How many of you?")[0]
    asked = _said(rt, role="user", text="OK, back to my booking")[0]
    decided = next(e for e in rt.log if isinstance(e, Verdict) and e.user_version == asked.version)
    assert back.version < decided.version
    assert rt.state.slots["party_size"].value == 4
    assert rt.state.checkpoint == "main.confirm"


# --- 5. loud failures ---------------------------------------------------------------------------


async def test_a_director_outage_is_a_warning_an_event_and_a_session_error(
    playbook: Playbook, caplog: pytest.LogCaptureFixture,
) -> None:
    async with FakeOpenAIServer(talker=["Sure, how many of you?"]) as server:
        dialog = DialogMachineLLM(playbook, talker=_client(server, "talker"),
                                  director=_client(_dead_endpoint(), "director"))
        events: list[Any] = []
        dialog.on("superdialog_event", events.append)
        errors: list[Any] = []
        async with _session(dialog) as session:
            session.on("error", errors.append)
            await session.start(DialogAgent(dialog, on_end="none"))
            await _until(lambda: _messages(session))
            with caplog.at_level(logging.WARNING):
                result = await session.run(user_input="a table please")  # never raises
                await dialog.runtime.wait_idle()
                await _until(lambda: errors)
            result.expect.next_event().is_message(role="assistant")
    failures = [e.data for e in events if e.kind == "model_failure"]
    assert [f["role"] for f in failures] == ["director"] and failures[0]["in_a_row"] == 1
    assert any("the Director failed" in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING)
    assert errors and errors[0].error.recoverable
    degraded = [e for e in dialog.runtime.log if isinstance(e, Degraded) and e.model_failure]
    assert [d.component for d in degraded] == ["director"]


async def test_policies_model_failure_ends_the_say_that_again_loop(playbook: Playbook) -> None:
    doc = PLAYBOOK.replace("journeys:", """policies:
  model_failure:
    after: 2
    line: "Sorry, we have a technical problem right now."
    then: main.failed
journeys:""", 1)
    playbook = Playbook.from_yaml(doc)
    async with FakeOpenAIServer(director=[{}, {}]) as server:
        dialog = DialogMachineLLM(playbook, talker=_client(_dead_endpoint(), "talker"),
                                  director=_client(server, "director"))
        async with _session(dialog) as session:
            await session.start(DialogAgent(dialog, on_end="none"))
            await _until(lambda: _messages(session))
            first = await session.run(user_input="a table please")
            first.expect.next_event().is_message(role="assistant")
            assert first.events[0].item.text_content == "Sorry, could you say that again?"
            second = await session.run(user_input="a table for two please")
            text = second.events[0].item.text_content
            rt = dialog.runtime
            await rt.wait_idle()
    assert text == ("Sorry, we have a technical problem right now. "
                    "Please call us back later. Goodbye.")
    assert rt.state.ended and rt.state.outcome == "technical_failure"
    assert [u.purpose for u in _said(rt, role="assistant", kind="line")] == [
        "recovery", "model_failure"]


async def test_a_dead_talker_inside_a_fallback_adapter_is_answered_by_the_backup(
    playbook: Playbook,
) -> None:
    async with FakeOpenAIServer(director=[{}, {"slots": {"party_size": 4}}]) as main, \
            FakeOpenAIServer(talker=["Of course, for how many?", "Four people, noted."]) as spare:
        dialog = DialogMachineLLM(playbook, talker=_client(_dead_endpoint(), "talker"),
                                  director=_client(main, "director"), on_talker_error="raise")
        backup = _client(spare, "backup")
        fallback = llm.FallbackAdapter([dialog, backup])
        async with _session(fallback) as session:
            await session.start(DialogAgent(fallback, dialog=dialog, on_end="none"))
            await _until(lambda: _messages(session))
            first = await session.run(user_input="a table please")
            first.expect.next_event().is_message(role="assistant")
            assert first.events[0].item.text_content == "Of course, for how many?"
            second = await session.run(user_input="four of us")
            assert second.events[0].item.text_content == "Four people, noted."
            rt = dialog.runtime
            await _until(lambda: len(_said(rt, kind="fallback")) == 2)
            await rt.wait_idle()
        # The Director still decided both turns (one call each); the backup spoke.
        assert len(main.director_requests) == 2
        assert len(spare.talker_requests) == 2
    assert [u.text for u in _said(rt, role="user")] == ["a table please", "four of us"]
    backup_lines = _said(rt, role="assistant", kind="fallback")
    assert [u.text for u in backup_lines] == ["Of course, for how many?", "Four people, noted."]
    assert backup_lines[0].agent == f"{backup.provider}/backup"
    # The failed attempts and the recovery probes logged nothing: no recovery line, no
    # talker degradation; what the caller heard is what the log says.
    assert not _said(rt, role="assistant", purpose="recovery")
    assert not [e for e in rt.log if isinstance(e, Degraded) and e.component == "talker"]
    assert rt.state.slots["party_size"].value == 4


def test_dialog_agent_names_the_dialog_inside_a_wrapper(playbook: Playbook) -> None:
    from tests.livekit_scripted import DirectorLLM, TalkerLLM

    dialog = DialogMachineLLM(playbook, talker=TalkerLLM(["x"]), director=DirectorLLM([]))
    other = TalkerLLM(["y"])
    assert DialogAgent(llm.FallbackAdapter([dialog, other])).dialog is dialog  # found inside
    with pytest.raises(TypeError, match="dialog="):
        DialogAgent(llm.FallbackAdapter([other]))
    with pytest.raises(ValueError, match="on_talker_error"):
        DialogMachineLLM(playbook, talker=TalkerLLM(["x"]), on_talker_error="retry")


# --- 6. usage -------------------------------------------------------------------------------


async def test_director_tokens_count_in_session_usage_under_their_own_model(
    playbook: Playbook,
) -> None:
    async with FakeOpenAIServer(talker=["Two, lovely."],
                                director=[{"slots": {"party_size": 2}}]) as server:
        director = _client(server, "director-model")
        dialog = DialogMachineLLM(playbook, talker=_client(server, "talker-model"),
                                  director=director)
        metrics: list[Any] = []
        dialog.on("metrics_collected", metrics.append)
        async with _session(dialog) as session:
            await session.start(DialogAgent(dialog, on_end="none"))
            await _until(lambda: _messages(session))
            await session.run(user_input="two of us")
            await dialog.runtime.wait_idle()
            usage = {(u.provider, u.model): u for u in session.usage.model_usage
                     if hasattr(u, "input_tokens")}
    # The fake server reports 50 prompt + 10 completion tokens per Director call.
    spent = usage[(director.provider, "director-model")]
    assert (spent.input_tokens, spent.output_tokens) == (50, 10)
    labels = [m.label for m in metrics]
    assert DIRECTOR_METRICS_LABEL in labels and dialog.label in labels
    talker_side = [m for m in metrics if m.label == dialog.label]
    assert all(m.metadata.model_name == "talker-model" for m in talker_side)


async def test_a_fallback_adapters_recovery_probe_asks_the_talker_and_logs_nothing(
    playbook: Playbook,
) -> None:
    async with FakeOpenAIServer(talker=["Ready."], director=[{}], fail_talker=1) as main, \
            FakeOpenAIServer(talker=["Backup here, how many?"]) as spare:
        dialog = DialogMachineLLM(playbook, talker=_client(main, "talker"),
                                  director=_client(main, "director"), on_talker_error="raise")
        fallback = llm.FallbackAdapter([dialog, _client(spare, "backup")])
        back: list[Any] = []
        fallback.on("llm_availability_changed", back.append)
        ctx = llm.ChatContext.empty()
        async with fallback.chat(chat_ctx=ctx.copy()) as stream:
            assert (await stream.collect()).text == OPENING  # a verbatim line: no Talker call
        ctx.add_message(role="assistant", content=OPENING)
        ctx.add_message(role="user", content="a table please")
        async with fallback.chat(chat_ctx=ctx) as stream:
            answer = (await stream.collect()).text
        assert answer == "Backup here, how many?"
        await _until(lambda: any(b.available for b in back))  # the probe found the Talker back
        rt = dialog.runtime
        await rt.wait_idle()
        # The probe asked the Talker a one-line health check, not the caller's turn.
        probe = main.talker_requests[-1]["messages"]
        assert "Health check" in probe[0]["content"] and len(main.talker_requests) == 2
        assert len(main.director_requests) == 1  # the failed attempt's turn, decided once
    assert [u.text for u in _said(rt, role="user")] == ["a table please"]
    # Neither the failed attempt nor the probe spoke: the opening is the only line.
    assert [u.text for u in _said(rt, role="assistant")] == [OPENING]
    assert not [e for e in rt.log if isinstance(e, Degraded) and e.component == "talker"]


async def test_with_a_plain_agent_a_say_is_logged_at_the_next_reply_and_turns_stay_turns(
    playbook: Playbook,
) -> None:
    line = "One moment while I open the book."
    async with FakeOpenAIServer(talker=["Two, wonderful."],
                                director=[{"slots": {"party_size": 2}}]) as server:
        dialog = DialogMachineLLM(playbook, talker=_client(server, "talker"),
                                  director=_client(server, "director"))
        async with _session(dialog) as session:
            await session.start(Agent(instructions=""))
            dialog.bind_session(session)  # late lines; also names this LLM's agent in history
            await session.generate_reply()
            await session.say(line)
            await session.run(user_input="two of us")
            rt = dialog.runtime
            await rt.wait_idle()
        assert len(server.director_requests) == 1
    assert [(u.kind, u.agent) for u in _said(rt, role="assistant", text=line)] == [("say", None)]
    assert [(u.text, u.agent) for u in _said(rt, role="user")] == [("two of us", None)]
    assert rt.state.slots["party_size"].value == 2
