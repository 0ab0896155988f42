"""DialogMachineLLM and DialogAgent in a real AgentSession (text mode, no server).

Barge-in, regeneration, two user messages at once, greeting on enter, outbound calls,
silence, resume from a JsonlStore log, and the stream's LiveKit contract (chunks, usage,
no retries).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable
from pathlib import Path
from typing import Any

import pytest
from livekit.agents import AgentSession, ModelSettings, llm
from superdialog_core import JsonlStore, Playbook
from superdialog_core.events import Degraded, External, LogRepaired, SpeechCorrection, Utterance

from superdialog_livekit import DialogAgent, DialogMachineLLM
from tests.livekit_scripted import DirectorLLM, TalkerLLM

PLAYBOOK = """
policies:
  silence:
    max_prompts: 1
    prompts: ["Are you still there?"]
    then: main.gone
journeys:
  main:
    checkpoints:
      - id: ask
        say_verbatim: "Welcome! How many are you?"
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
      - id: gone
        say_verbatim: "Goodbye."
        terminal: true
        outcome: no_answer
"""


@pytest.fixture
def playbook() -> Playbook:
    return Playbook.from_yaml(PLAYBOOK)


def _session(dialog: DialogMachineLLM, **kwargs: Any) -> AgentSession:
    return AgentSession(llm=dialog, vad=None, turn_handling={"turn_detection": None}, **kwargs)


def _messages(session: AgentSession) -> list[tuple[str, str]]:
    return [(i.role, i.text_content or "") for i in session.history.items if i.type == "message"]


async def _until(predicate: Any, timeout: float = 3.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


class SlowPlayoutAgent(DialogAgent):
    """Forwards the transcript slowly, like TTS playout lagging behind the LLM."""

    async def transcription_node(self, text: AsyncIterable[str], model_settings: ModelSettings
                                 ) -> AsyncIterable[str]:
        async for piece in text:
            await asyncio.sleep(0.12)
            yield piece


async def test_greeting_on_enter_and_the_stream_contract(playbook: Playbook) -> None:
    dialog = DialogMachineLLM(playbook, talker=TalkerLLM(["Great."]), director=DirectorLLM([]))
    metrics: list[Any] = []
    dialog.on("metrics_collected", metrics.append)
    async with _session(dialog) as session:
        await session.start(DialogAgent(dialog, on_end="none"))
        await _until(lambda: _messages(session))
        assert _messages(session) == [("assistant", "Welcome! How many are you?")]
    assert metrics and metrics[0].ttft >= 0 and not metrics[0].cancelled
    assert metrics[0].metadata.model_provider == "superdialog"


async def test_barge_in_logs_heard_text_applies_the_decision_and_the_call_goes_on(
    playbook: Playbook,
) -> None:
    talker = TalkerLLM(["one two three four five six seven eight nine ten eleven twelve",
                        "Is that right?", "Anything else?"], delay=0.08)
    director = DirectorLLM([{"slots": {"party_size": 4}}, {"advance": "main.done"}])
    dialog = DialogMachineLLM(playbook, talker=talker, director=director)
    async with _session(dialog) as session:
        await session.start(SlowPlayoutAgent(dialog, on_end="none"))
        await _until(lambda: len(_messages(session)) == 1)
        run = asyncio.ensure_future(session.run(user_input="four of us"))
        await asyncio.sleep(0.45)
        await session.interrupt()
        result = await run
        message = result.events[0].item
        assert message.interrupted is True
        heard = message.text_content.strip()
        assert heard and heard.startswith("one") and "twelve" not in heard
        assert talker.cancelled == 1  # the Talker stream itself was stopped

        rt = dialog.runtime
        await rt.wait_idle()
        assert rt.state.slots["party_size"].value == 4  # the Director's decision still applied
        assert rt.state.checkpoint == "main.confirm"
        spoken = next(e for e in rt.log if isinstance(e, Utterance) and e.kind == "talker")
        correction = next(e for e in rt.log if isinstance(e, SpeechCorrection))
        assert correction.utterance_version == spoken.version
        assert correction.heard_text == heard
        assert len(spoken.text) > len(heard)  # more was generated than the caller heard

        result = await session.run(user_input="yes")
        result.expect.next_event().is_message(role="assistant")
        assert result.events[0].item.interrupted is False
        assert "Booked for 4. Goodbye!" in result.events[0].item.text_content


async def _collect(dialog: DialogMachineLLM, ctx: llm.ChatContext) -> str:
    async with dialog.chat(chat_ctx=ctx.copy()) as stream:
        return (await stream.collect()).text


async def test_regeneration_with_the_same_context_logs_nothing_twice(playbook: Playbook) -> None:
    director = DirectorLLM([{"slots": {"party_size": 2}}, {"slots": {"party_size": 9}}])
    dialog = DialogMachineLLM(playbook, talker=TalkerLLM(["Fine.", "Two, right?"]), director=director)
    ctx = llm.ChatContext.empty()
    opening = await _collect(dialog, ctx)
    assert opening == "Welcome! How many are you?"
    ctx.add_message(role="assistant", content=opening)
    ctx.add_message(role="user", content="two of us")
    first = await _collect(dialog, ctx)
    assert first == "Fine. Two, right?"
    again = await _collect(dialog, ctx)  # LiveKit regenerates with the same context
    assert again == ""
    rt = dialog.runtime
    await rt.wait_idle()
    users = [e for e in rt.log if isinstance(e, Utterance) and e.role == "user"]
    assert [u.text for u in users] == ["two of us"]
    assert len(director.contexts) == 1
    assert rt.state.slots["party_size"].value == 2


async def test_two_user_messages_in_a_row_run_as_consecutive_turns(playbook: Playbook) -> None:
    director = DirectorLLM([{}, {"slots": {"party_size": 5}}])
    talker = TalkerLLM(["Sorry?", "Five, got it.", "Shall I book it?"])
    dialog = DialogMachineLLM(playbook, talker=talker, director=director)
    ctx = llm.ChatContext.empty()
    ctx.add_message(role="assistant", content=await _collect(dialog, ctx))
    ctx.add_message(role="user", content="hmm")
    ctx.add_message(role="user", content="five people")
    reply = await _collect(dialog, ctx)
    assert reply == "Five, got it. Shall I book it?"
    rt = dialog.runtime
    await rt.wait_idle()
    users = [e for e in rt.log if isinstance(e, Utterance) and e.role == "user"]
    assert [u.text for u in users] == ["hmm", "five people"]
    assert len(director.contexts) == 2  # the Director decided on each, in order
    unheard = next(e for e in rt.log if isinstance(e, Utterance) and e.text == "Sorry?")
    correction = next(e for e in rt.log if isinstance(e, SpeechCorrection))
    assert (correction.utterance_version, correction.heard_text) == (unheard.version, "")
    assert rt.state.slots["party_size"].value == 5


async def test_outbound_phone_call_waits_for_the_callee(playbook: Playbook) -> None:
    dialog = DialogMachineLLM(playbook, talker=TalkerLLM(["Hello, this is the restaurant."]),
                              director=DirectorLLM([{}]),
                              call={"channel": "phone", "direction": "outbound",
                                    "called_number": "+4915112345678"})
    async with _session(dialog) as session:
        agent = DialogAgent(dialog, on_end="none")
        await session.start(agent)
        await asyncio.sleep(0.2)
        assert _messages(session) == []  # nothing said before the callee speaks
        result = await session.run(user_input="Hello?")
        result.expect.next_event().is_message(role="assistant")
        assert agent.end_mode() == "none"
        assert DialogAgent(dialog).end_mode() == "delete_room"  # the default on phone calls
    assert dialog.runtime.state.call["called_number"] == "+4915112345678"
    users = [e.text for e in dialog.runtime.log if isinstance(e, Utterance) and e.role == "user"]
    assert users == ["Hello?"]


async def test_silence_prompts_then_routes_and_ends_the_session(playbook: Playbook) -> None:
    dialog = DialogMachineLLM(playbook, talker=TalkerLLM(["x"]), director=DirectorLLM([]))
    session = _session(dialog, user_away_timeout=0.25)
    closed = asyncio.get_running_loop().create_future()
    session.on("close", lambda ev: closed.done() or closed.set_result(ev))
    await session.start(DialogAgent(dialog))
    try:
        await asyncio.wait_for(closed, 5.0)
    finally:
        await session.aclose()
    assert [t for r, t in _messages(session) if r == "assistant"] == [
        "Welcome! How many are you?", "Are you still there?", "Goodbye."]
    rt = dialog.runtime
    assert [e.kind for e in rt.log if isinstance(e, External)] == ["silence", "silence"]
    assert rt.state.outcome == "no_answer"
    prompts = [e for e in rt.log if isinstance(e, Utterance) and e.text == "Are you still there?"]
    assert len(prompts) == 1  # logged once by the runtime, recognised when it came back


async def test_resume_from_a_jsonl_log_does_not_replay_the_opening(
    playbook: Playbook, tmp_path: Path
) -> None:
    first = DialogMachineLLM(playbook, talker=TalkerLLM(["Got it."]),
                             director=DirectorLLM([{"slots": {"party_size": 3}}]),
                             store=JsonlStore(tmp_path), session_id="call-7")
    async with _session(first) as session:
        await session.start(DialogAgent(first, on_end="none"))
        await session.run(user_input="three")
        await first.runtime.wait_idle()
    stored = len(first.runtime.log)

    second = DialogMachineLLM(playbook, talker=TalkerLLM(["Lovely."]),
                              director=DirectorLLM([{"advance": "main.done"}]),
                              store=JsonlStore(tmp_path), session_id="call-7")
    async with _session(second) as session:
        await session.start(DialogAgent(second, on_end="none"))
        await asyncio.sleep(0.2)
        assert _messages(session) == []  # no opening on a resumed call
        assert second.resumed and second.session_id == "call-7"
        assert second.runtime.state.slots["party_size"].value == 3
        result = await session.run(user_input="yes please")
        assert "Booked for 3. Goodbye!" in result.events[0].item.text_content
    log = second.runtime.log
    assert log[stored].version == stored + 1  # the resumed call continues the stored log
    assert sum(1 for e in log if isinstance(e, Utterance) and e.text.startswith("Welcome")) == 1


async def test_a_log_cut_before_the_first_advance_speaks_the_opening(
    playbook: Playbook, tmp_path: Path
) -> None:
    """A worker died during the start: the log has session_start and nothing the caller
    heard. That call is not resumed; the opening is spoken (the runtime re-runs its start)."""
    first = DialogMachineLLM(playbook, talker=TalkerLLM([]), director=DirectorLLM([]),
                             store=JsonlStore(tmp_path), session_id="call-9")
    async with _session(first) as session:
        await session.start(DialogAgent(first, on_end="none"))
        await _until(lambda: _messages(session))
        await first.runtime.wait_idle()
    path = JsonlStore(tmp_path).path("call-9")
    path.write_bytes(path.read_bytes().split(b"\n", 1)[0] + b"\n")  # session_start only

    second = DialogMachineLLM(playbook, talker=TalkerLLM(["Got it."]),
                              director=DirectorLLM([{"slots": {"party_size": 3}}]),
                              store=JsonlStore(tmp_path), session_id="call-9")
    async with _session(second) as session:
        await session.start(DialogAgent(second, on_end="none"))
        await _until(lambda: _messages(session))
        assert _messages(session) == [("assistant", "Welcome! How many are you?")]
        assert not second.resumed
        await second.runtime.wait_idle()
    log = second.runtime.log
    assert sum(1 for e in log if type(e).__name__ == "SessionStart") == 1  # the stored one, kept
    assert [e.text for e in log if isinstance(e, Utterance)] == ["Welcome! How many are you?"]


async def test_resume_cuts_a_torn_last_line_and_logs_it(playbook: Playbook, tmp_path: Path) -> None:
    first = DialogMachineLLM(playbook, talker=TalkerLLM(["Got it."]),
                             director=DirectorLLM([{"slots": {"party_size": 3}}]),
                             store=JsonlStore(tmp_path), session_id="call-8")
    async with _session(first) as session:
        await session.start(DialogAgent(first, on_end="none"))
        await session.run(user_input="three")
        await first.runtime.wait_idle()
    stored = len(first.runtime.log)
    with JsonlStore(tmp_path).path("call-8").open("ab") as handle:
        handle.write(b'{"type":"utterance","version":')  # the worker died mid-append

    second = DialogMachineLLM(playbook, talker=TalkerLLM(["Lovely."]),
                              director=DirectorLLM([{"advance": "main.done"}]),
                              store=JsonlStore(tmp_path), session_id="call-8")
    async with _session(second) as session:
        await session.start(DialogAgent(second, on_end="none"))
        await asyncio.sleep(0.2)
        assert second.resumed and second.runtime.state.slots["party_size"].value == 3
        result = await session.run(user_input="yes please")
        assert "Booked for 3. Goodbye!" in result.events[0].item.text_content
    repaired = second.runtime.log[stored]
    assert isinstance(repaired, LogRepaired) and repaired.cut_bytes == len(
        b'{"type":"utterance","version":')


def test_call_values_are_settable_only_before_the_first_turn(playbook: Playbook) -> None:
    dialog = DialogMachineLLM(playbook, talker=TalkerLLM(["x"]), director=DirectorLLM([]))
    dialog.set_call({"channel": "phone", "direction": "inbound", "calling_number": "+4915112345678"})
    assert dialog.call_values["calling_number"] == "+4915112345678"
    assert dialog.runtime.session_id  # building the runtime freezes the call values
    with pytest.raises(RuntimeError, match="before the first turn"):
        dialog.set_call({"channel": "web"})


async def test_call_values_reach_the_session_start_event(playbook: Playbook) -> None:
    dialog = DialogMachineLLM(playbook, talker=TalkerLLM(["x"]), director=DirectorLLM([]))
    dialog.set_call({"channel": "phone", "direction": "inbound", "calling_number": "+4915112345678"})
    await _collect(dialog, llm.ChatContext.empty())
    assert dialog.call_values["calling_number"] == "+4915112345678"
    assert dialog.runtime.log[0].call["channel"] == "phone"


LATE = """
journeys:
  main:
    checkpoints:
      - id: ask
        gate: hard
        say_verbatim: "Welcome! How many are you?"
        slots:
          party_size: {type: int, required: true}
        advance_when:
          - {id: got, when: "slots.party_size", judge: expr, to: main.done}
      - id: done
        say_verbatim: "Booked for {{ slots.party_size }}. Goodbye!"
        terminal: true
        outcome: booked
"""


async def test_a_late_line_is_spoken_with_say_logged_once_and_ends_the_call() -> None:
    director = DirectorLLM([{"slots": {"party_size": 4}}], delay=0.5)
    dialog = DialogMachineLLM(Playbook.from_yaml(LATE), talker=TalkerLLM(["x"]), director=director,
                              barrier_timeout=0.02, hold_timeout=0.05)
    session = _session(dialog)
    closed = asyncio.get_running_loop().create_future()
    session.on("close", lambda ev: closed.done() or closed.set_result(ev))
    await session.start(DialogAgent(dialog))
    try:
        result = await session.run(user_input="four of us")
        result.expect.next_event().is_message(role="assistant")  # the hold ladder
        assert "Booked" not in result.events[0].item.text_content
        await asyncio.wait_for(closed, 5.0)
    finally:
        await session.aclose()
    assert _messages(session)[-1] == ("assistant", "Booked for 4. Goodbye!")
    logged = [e for e in dialog.runtime.log
              if isinstance(e, Utterance) and e.text == "Booked for 4. Goodbye!"]
    assert len(logged) == 1
    assert not any(isinstance(e, SpeechCorrection) for e in dialog.runtime.log)


async def test_a_talker_failure_mid_reply_is_never_retried_or_duplicated(playbook: Playbook) -> None:
    talker = TalkerLLM(["Let me see about that table for you"], fail_after=3)
    dialog = DialogMachineLLM(playbook, talker=talker, director=DirectorLLM([{}]))
    errors: list[Any] = []
    dialog.on("error", errors.append)
    async with _session(dialog) as session:
        await session.start(DialogAgent(dialog, on_end="none"))
        await _until(lambda: _messages(session))
        result = await session.run(user_input="a table please")
        text = result.events[0].item.text_content
    assert text.startswith("Let me see ")
    assert text.count("Let me see") == 1  # the three words went out once; no retry repeated them
    assert len(talker.contexts) == 1  # one Talker call for the reply: no hidden retry
    # The engine answered the failure (no retry, no raise), and said so: one recoverable
    # LiveKit LLM error, which the session re-emits as its "error" event (SPEC §10: loud).
    assert [e.recoverable for e in errors] == [True]
    assert "scripted connection drop" in str(errors[0].error)
    rt = dialog.runtime
    degraded = [e for e in rt.log if isinstance(e, Degraded)]
    assert degraded and "talker" in degraded[0].component


async def test_a_phone_call_deletes_the_room_after_the_terminal_line(
    playbook: Playbook, monkeypatch: pytest.MonkeyPatch
) -> None:
    from livekit.agents.testing import fake_job_context

    director = DirectorLLM([{"slots": {"party_size": 2}}, {"advance": "main.done"}])
    dialog = DialogMachineLLM(playbook, talker=TalkerLLM(["Two.", "Right?"]), director=director,
                              call={"channel": "phone", "direction": "inbound"})
    deleted: list[str] = []
    with fake_job_context() as ctx:
        async def delete_room(room_name: str | None = None) -> None:
            deleted.append(room_name or ctx.room.name or "fake-room")

        monkeypatch.setattr(ctx, "delete_room", delete_room)
        session = _session(dialog)
        closed = asyncio.get_running_loop().create_future()
        session.on("close", lambda ev: closed.done() or closed.set_result(ev))
        await session.start(DialogAgent(dialog))
        try:
            await session.run(user_input="two")
            result = await session.run(user_input="yes")
            assert "Goodbye!" in result.events[0].item.text_content
            await asyncio.wait_for(closed, 5.0)
        finally:
            await session.aclose()
    assert len(deleted) == 1  # hung up once, after the line played


async def test_models_built_from_uris_are_closed_with_the_llm(
    playbook: Playbook, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    given = TalkerLLM(["x"])
    dialog = DialogMachineLLM(playbook, talker=given, director="http://127.0.0.1:9/v1#director")
    owned = dialog._director.llm
    closed: list[str] = []
    monkeypatch.setattr(owned, "aclose", lambda: _record(closed, "director"))
    monkeypatch.setattr(given, "aclose", lambda: _record(closed, "talker"))
    await dialog.aclose()
    assert closed == ["director"]  # the LLM passed in belongs to the caller


async def _record(into: list[str], name: str) -> None:
    into.append(name)


async def test_a_caller_who_speaks_while_the_store_loads_hears_the_opening_first(
    playbook: Playbook,
) -> None:
    from superdialog_core import MemoryStore

    class SlowStore(MemoryStore):
        async def load(self, session_id: str) -> Any:
            await asyncio.sleep(0.3)
            return await super().load(session_id)

    dialog = DialogMachineLLM(playbook, talker=TalkerLLM(["Four, lovely.", "Right?"]),
                              director=DirectorLLM([{"slots": {"party_size": 4}}]),
                              store=SlowStore(), session_id="early")
    async with _session(dialog) as session:
        await session.start(DialogAgent(dialog, on_end="none"))
        result = await session.run(user_input="four of us")  # before the store has answered
        result.expect.next_event().is_message(role="assistant")
    print(_messages(session))
    log = dialog.runtime.log
    kinds = [(e.role, e.text) for e in log if isinstance(e, Utterance)]
    print(kinds)
    assert kinds[0] == ("assistant", "Welcome! How many are you?")
    assert kinds[1] == ("user", "four of us")


async def test_a_preemptive_generation_waits_for_the_turn_and_a_dropped_one_leaves_no_trace(
    playbook: Playbook,
) -> None:
    from livekit.agents.voice.agent_activity import _SpeechHandleContextVar
    from livekit.agents.voice.speech_handle import SpeechHandle

    director = DirectorLLM([{"slots": {"party_size": 6}}])
    dialog = DialogMachineLLM(playbook, talker=TalkerLLM(["Six.", "Right?"]), director=director)
    ctx = llm.ChatContext.empty()
    ctx.add_message(role="assistant", content=await _collect(dialog, ctx))
    rt = dialog.runtime
    version = rt.log.version

    # LiveKit drops a speculative reply (the caller kept talking): nothing reaches the log.
    dropped_ctx = ctx.copy()
    dropped_ctx.add_message(role="user", content="six of")
    token = _SpeechHandleContextVar.set(SpeechHandle.create())  # never scheduled
    try:
        stream = dialog.chat(chat_ctx=dropped_ctx)
    finally:
        _SpeechHandleContextVar.reset(token)
    await asyncio.sleep(0.1)
    await stream.aclose()
    assert rt.log.version == version and director.contexts == []

    # The confirmed attempt waits until LiveKit schedules its speech, then runs the turn.
    ctx.add_message(role="user", content="six of us")
    handle = SpeechHandle.create()
    token = _SpeechHandleContextVar.set(handle)
    try:
        stream = dialog.chat(chat_ctx=ctx.copy())
    finally:
        _SpeechHandleContextVar.reset(token)
    await asyncio.sleep(0.1)
    assert rt.log.version == version  # still speculative: nothing logged yet
    handle._mark_scheduled()  # LiveKit confirmed the turn
    async with stream:
        text = (await stream.collect()).text
    assert text == "Six. Right?"
    users = [e.text for e in rt.log if isinstance(e, Utterance) and e.role == "user"]
    assert users == ["six of us"]


def test_bad_start_values_are_refused_at_construction_and_by_set_call(playbook: Playbook) -> None:
    from superdialog_core.errors import CallStartError, ConfigError

    pb = Playbook.from_yaml(PLAYBOOK + "call_start:\n  customer: {type: int, required: true}\n")
    with pytest.raises(CallStartError, match="customer"):
        DialogMachineLLM(pb, talker=TalkerLLM(["x"]), call_start={"customer": "many"})
    with pytest.raises(ConfigError, match=r"call\.colour"):
        DialogMachineLLM(playbook, talker=TalkerLLM(["x"]), call={"colour": "red"})
    dialog = DialogMachineLLM(pb, talker=TalkerLLM(["x"]), call_start={"customer": 7})
    with pytest.raises(CallStartError):
        dialog.set_call(call_start={"customer": "many"})
    assert dialog.runtime.state.version == 0 and dialog._call_start == {"customer": 7}


async def test_barge_in_closes_the_talkers_http_stream(playbook: Playbook) -> None:
    from livekit.plugins import openai

    from tests.fake_openai_server import FakeOpenAIServer

    words = " ".join(f"word{i}" for i in range(40))
    async with FakeOpenAIServer(talker=[words], director=[{"slots": {"party_size": 3}}],
                                token_delay=0.03) as server:
        model = openai.LLM(model="m", base_url=server.base_url, api_key="test")
        dialog = DialogMachineLLM(playbook, talker=model)  # the director defaults to the talker
        async with _session(dialog) as session:
            await session.start(DialogAgent(dialog, on_end="none"))
            await _until(lambda: _messages(session))
            run = asyncio.ensure_future(session.run(user_input="three"))
            await _until(lambda: len(server.talker_requests) == 1)
            await asyncio.sleep(0.2)
            await session.interrupt()
            result = await run
            assert result.events[0].item.interrupted is True
            await dialog.runtime.wait_idle()
            await _until(lambda: server.disconnects == 1)
        assert dialog.runtime.state.slots["party_size"].value == 3
        assert len(server.director_requests) == 1  # the Director was not cancelled with the speech


async def test_the_director_defaults_to_the_same_talker_llm(
    playbook: Playbook, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    dialog = DialogMachineLLM(playbook, talker="openai/gpt-4.1-mini")
    assert dialog._director.llm is dialog._talker.llm
    closed: list[str] = []
    monkeypatch.setattr(dialog._talker.llm, "aclose", lambda: _record(closed, "shared"))
    await dialog.aclose()
    assert closed == ["shared"]


async def test_max_call_seconds_ends_a_silent_call_with_the_timeout_line(playbook: Playbook) -> None:
    from superdialog_core.turn.turnflow import TIMEOUT_LINE

    timed = Playbook.from_yaml(PLAYBOOK.replace("policies:\n", "policies:\n  max_call_seconds: 0.4\n"))
    dialog = DialogMachineLLM(timed, talker=TalkerLLM(["x"]), director=DirectorLLM([]))
    session = _session(dialog)  # nobody speaks, no away timer: only the call timer can end it
    closed = asyncio.get_running_loop().create_future()
    session.on("close", lambda ev: closed.done() or closed.set_result(ev))
    ended: list[Any] = []
    dialog.on("superdialog_event", lambda e: e.kind == "ended" and ended.append(e.data))
    await session.start(DialogAgent(dialog))
    try:
        await asyncio.wait_for(closed, 5.0)
    finally:
        await session.aclose()
    assert [t for r, t in _messages(session) if r == "assistant"] == [
        "Welcome! How many are you?", TIMEOUT_LINE]
    rt = dialog.runtime
    assert rt.state.outcome == "timeout" and ended == [{"outcome": "timeout"}]
    assert [(e.kind, e.name) for e in rt.log if isinstance(e, External)] == [
        ("timer", "max_call_seconds")]
    assert sum(1 for e in rt.log if isinstance(e, Utterance) and e.text == TIMEOUT_LINE) == 1


async def test_the_call_timer_is_cancelled_when_the_call_ends_first(playbook: Playbook) -> None:
    timed = Playbook.from_yaml(PLAYBOOK.replace("policies:\n", "policies:\n  max_call_seconds: 0.5\n"))
    dialog = DialogMachineLLM(timed, talker=TalkerLLM(["Got it."]), director=DirectorLLM(
        [{"slots": {"party_size": 2}}, {"advance": "main.done"}]))
    async with _session(dialog) as session:
        agent = DialogAgent(dialog, on_end="none")
        await session.start(agent)
        await session.run(user_input="two")
        await session.run(user_input="yes")
        await _until(lambda: dialog.runtime.state.ended)
        await asyncio.sleep(0.7)
        assert agent._call_timer is None
    rt = dialog.runtime
    assert rt.state.outcome == "booked"
    assert not [e for e in rt.log if isinstance(e, External)]


async def test_the_talker_request_goes_out_before_the_directors_prompt_is_built(
    playbook: Playbook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEC §14: at a soft gate nothing non-essential sits before the Talker's request."""
    import superdialog_core.roles.director as director_module

    order: list[str] = []
    build = director_module.build_director_request

    def spy(*args: Any, **kwargs: Any) -> Any:
        order.append("director prompt")
        return build(*args, **kwargs)

    monkeypatch.setattr(director_module, "build_director_request", spy)

    class Talker(TalkerLLM):
        def chat(self, **kwargs: Any) -> Any:
            stream = super().chat(**kwargs)
            run = stream._run

            async def sending() -> None:  # where a real plugin sends its HTTP request
                order.append("talker request")
                await run()

            stream._run = sending  # type: ignore[method-assign]
            return stream

    dialog = DialogMachineLLM(playbook, talker=Talker(["Sure, how many?"]),
                              director=DirectorLLM([{}]))
    async with _session(dialog) as session:
        await session.start(DialogAgent(dialog, on_end="none"))
        await _until(lambda: any(r == "assistant" for r, _ in _messages(session)))
        order.clear()
        await session.run(user_input="hello there")
        await dialog.runtime.wait_idle()
    assert order[:2] == ["talker request", "director prompt"]
