"""The engine side of SPEC §10's loud failures and host habits, with scripted models.

``policies.model_failure`` counted from the log (in a row, per role), ``talker_errors="raise"``
(nothing logged for the failed attempt), host function calls and other-agent lines folding to
the same state from scratch, and the policy's validation.
"""

from __future__ import annotations

import pytest
from superdialog_core import (
    ConversationState,
    Playbook,
    PlaybookError,
    Runtime,
    ScriptedDirector,
    ScriptedTalker,
    TalkerFailed,
    TalkerToolCall,
)
from superdialog_core.events import Degraded, FunctionCall, Utterance

DOC = """
policies:
  model_failure: {after: 2, line: "We have a technical problem.", then: main.failed}
journeys:
  main:
    checkpoints:
      - id: ask
        goal: "Find out how many people are coming"
        slots:
          party_size: {type: int, required: true}
      - id: failed
        say_verbatim: "Please call back later."
        terminal: true
        outcome: technical_failure
"""


def _assistant(rt: Runtime) -> list[Utterance]:
    return [e for e in rt.log if isinstance(e, Utterance) and e.role == "assistant"]


async def test_the_director_failing_twice_in_a_row_speaks_the_policy_line_and_moves_on() -> None:
    director = ScriptedDirector([RuntimeError("down"), RuntimeError("down"), RuntimeError("down")])
    rt = Runtime(Playbook.from_yaml(DOC), director=director,
                 talker=ScriptedTalker(["How many?", "Sorry, how many?"]))
    await rt.start(speak=False)
    first = await rt.user_turn("hello")
    assert first.text == "How many?" and rt.state.model_failures == {"director": 1}
    second = await rt.user_turn("a table")
    assert second.text == "Sorry, how many? We have a technical problem. Please call back later."
    assert rt.state.ended and rt.state.outcome == "technical_failure"
    failures = [e for e in rt.log if isinstance(e, Degraded) and e.model_failure]
    assert [e.component for e in failures] == ["director", "director"]
    assert ConversationState.fold(rt.log, rt.playbook) == rt.state


async def test_a_verdict_resets_the_count_so_failures_must_come_in_a_row() -> None:
    director = ScriptedDirector([RuntimeError("down"), {}, RuntimeError("down"), {}])
    rt = Runtime(Playbook.from_yaml(DOC), director=director, talker=ScriptedTalker(["Ok."]))
    await rt.start(speak=False)
    for text in ("one", "two", "three", "four"):
        await rt.user_turn(text)
    assert not rt.state.ended and rt.state.checkpoint == "main.ask"


async def test_talker_errors_raise_logs_nothing_for_the_failed_attempt() -> None:
    rt = Runtime(Playbook.from_yaml(DOC), director=ScriptedDirector([{}]),
                 talker=ScriptedTalker([ConnectionError("refused")]), talker_errors="raise")
    await rt.start(speak=False)
    with pytest.raises(TalkerFailed) as info:
        await rt.user_turn("hello")
    assert isinstance(info.value.__cause__, ConnectionError)
    await rt.wait_idle()
    assert _assistant(rt) == []  # no recovery line: nobody heard one
    assert not [e for e in rt.log if isinstance(e, Degraded) and e.component == "talker"]
    assert rt.state.model_failures == {}  # not counted: the host's fallback answered
    # The caller's words were said, and the Director still decided them.
    assert [e.text for e in rt.log if isinstance(e, Utterance)] == ["hello"]
    assert len(rt._director.requests) == 1  # type: ignore[attr-defined]
    await rt.answered_turn("four of us", "Four, noted.", agent="backup")
    await rt.wait_idle()
    assert [(u.kind, u.agent) for u in _assistant(rt)] == [("fallback", "backup")]


async def test_host_function_calls_and_other_agent_lines_fold_the_same_from_scratch() -> None:
    def tool_then_text(request):  # a Talker that calls a host tool, then speaks
        return "Let me look."

    class ToolTalker(ScriptedTalker):
        async def _stream(self, request, reply, chunks):  # type: ignore[override]
            if len(self.requests) == 1:  # the first segment calls the tool, once
                yield TalkerToolCall(call_id="c1", name="hours", arguments='{"day": "Mon"}')
            async for piece in super()._stream(request, reply, chunks):
                yield piece

    rt = Runtime(Playbook.from_yaml(DOC), director=ScriptedDirector([{}]),
                 talker=ToolTalker([tool_then_text, "Open until ten."]))
    await rt.start(speak=False)
    turn = await rt.user_turn("are you open monday?")
    assert turn.text == "Let me look."
    rt.function_result("c1", "hours", "12-22")
    async for _ in rt.stream_reply():
        pass
    shown = rt._speaker.talker.requests[-1].messages  # type: ignore[attr-defined]
    assert shown[-2]["tool_calls"][0]["name"] == "hours" and shown[-1]["content"] == "12-22"
    await rt.log_line("user", "is there parking?", agent="info_agent")
    await rt.log_line("assistant", "Yes.", kind="other_agent", agent="info_agent")
    await rt.wait_idle()
    assert [e.name for e in rt.log if isinstance(e, FunctionCall)] == ["hours"]
    assert rt.state.user_turns_in_checkpoint == 1  # the other agent's caller line is no turn
    assert ConversationState.fold(rt.log, rt.playbook) == rt.state


def test_policies_model_failure_is_validated() -> None:
    with pytest.raises(PlaybookError) as info:
        Playbook.from_yaml(DOC.replace("then: main.failed", "then: failed").replace(
            "after: 2", "after: 0"))
    paths = {p.path for p in info.value.problems}
    assert paths == {"policies.model_failure.after", "policies.model_failure.then"}
