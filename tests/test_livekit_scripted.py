"""``scripted:<file.yaml>`` model URIs through LiveKit (SPEC §12): one meaning everywhere.

A scripted URI is a real LiveKit ``llm.LLM``, so ``DialogMachineLLM`` runs it through the
same adapters as any model: a whole call in a real ``AgentSession`` (text mode) from
``tests/fixtures/scripts/replay_call.yaml``, whose log then replays without drift; and ``chat`` with
piped caller lines writes that log with ``--log``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from livekit.agents import AgentSession, llm
from superdialog_core import EventLog, Playbook
from superdialog_core.errors import ConfigError
from superdialog_core.events import Degraded
from superdialog_core.roles.scripts import load_script, scripted_director
from superdialog_core.turn.replay import replay
from test_replay import CALL, NOW, PLAYBOOK

from superdialog_livekit import DialogAgent, DialogMachineLLM
from superdialog_livekit.cli import main
from superdialog_livekit.scripted import ScriptedLLM
from superdialog_livekit.uris import director_from_uri, llm_from_uri


def test_a_scripted_uri_is_a_livekit_llm_for_either_role() -> None:
    talker = llm_from_uri(f"scripted:{CALL}", role="talker")
    director = llm_from_uri(f"scripted:{CALL}", role="director")
    assert isinstance(talker, ScriptedLLM) and isinstance(talker, llm.LLM)
    assert talker.remaining == len(load_script(CALL, "talker"))
    assert director.remaining == 5 and director.provider == "scripted"


@pytest.mark.parametrize(
    ("uri", "role", "message"),
    [
        ("scripted:", "talker", "names no script file"),
        ("scripted:/no/such/file.yaml", "talker", "file not found"),
        (f"scripted:{CALL}", "model", "plays the talker or the director"),
    ],
)
def test_bad_scripted_uris_say_what_is_wrong(uri: str, role: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        llm_from_uri(uri, role=role)


def test_director_from_uri_gives_the_engine_a_director_model() -> None:
    director = director_from_uri(f"scripted:{CALL}")
    assert hasattr(director, "decide") and director.remaining == 5


async def test_talker_streams_words_and_director_answers_with_the_verdict_tool() -> None:
    talker = llm_from_uri(f"scripted:{CALL}", role="talker")
    chunks = [c async for c in talker.chat(chat_ctx=llm.ChatContext.empty())]
    text = "".join(c.delta.content or "" for c in chunks if c.delta)
    assert text == "Osteria Lume, Sam speaking. How can I help?"
    assert sum(1 for c in chunks if c.delta and c.delta.content) == 8  # word by word
    director = llm_from_uri(f"scripted:{CALL}", role="director")
    chunks = [c async for c in director.chat(
        chat_ctx=llm.ChatContext.empty(),
        tool_choice={"type": "function", "function": {"name": "record_verdict"}})]
    (call,) = [t for c in chunks if c.delta for t in c.delta.tool_calls]
    assert call.name == "record_verdict" and json.loads(call.arguments) == {"advance": "table.collect"}


async def test_a_scripted_call_through_agent_session_replays_without_drift() -> None:
    # No director given: it defaults to the talker, and the file scripts both roles.
    dialog = DialogMachineLLM(str(PLAYBOOK), talker=f"scripted:{CALL}", now=NOW,
                              barrier_timeout=2.0)
    async with AgentSession(llm=dialog, vad=None, turn_handling={"turn_detection": None}) as session:
        await session.start(DialogAgent(dialog, on_end="none"))
        for line in load_script(CALL, "caller"):
            await session.run(user_input=line)
            await dialog.runtime.wait_idle()
        state = dialog.runtime.state
        assert state.ended and state.outcome == "booked", state
        log = EventLog.from_jsonl(dialog.runtime.log.to_jsonl())
    report = await replay(log, Playbook.load(PLAYBOOK), scripted_director(CALL))
    assert len(report.turns) == 5 and not report.has_drift, report.to_json()


def test_chat_with_scripted_uris_writes_a_log_that_replays(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    lines = "\n".join(load_script(CALL, "caller")) + "\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    monkeypatch.setenv("COLUMNS", "200")  # one row per reply: rich wraps cells at the width
    log_file = tmp_path / "chat.jsonl"
    code = main(["chat", str(PLAYBOOK), "--talker", f"scripted:{CALL}", "--log", str(log_file)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "ended: True  outcome: booked" in out
    assert "You're booked, Rossi. See you then!" in out
    assert f"log written to {log_file}" in err
    code = main(["replay", str(log_file), str(PLAYBOOK), "--director", f"scripted:{CALL}"])
    out, _ = capsys.readouterr()
    assert code == 0, out
    assert out.rstrip().endswith("no drift in 5 turns")



async def test_a_talker_only_script_asked_as_director_fails_loudly(tmp_path: Path) -> None:
    talker_only = tmp_path / "talker.yaml"
    talker_only.write_text("- Hello there.\n- Sure.\n")
    dialog = DialogMachineLLM(str(PLAYBOOK), talker=f"scripted:{talker_only}", now=NOW)
    async with AgentSession(llm=dialog, vad=None, turn_handling={"turn_detection": None}) as session:
        await session.start(DialogAgent(dialog, on_end="none"))
        await session.run(user_input="I'd like a table")
        await dialog.runtime.wait_idle()
        details = [e.detail for e in dialog.runtime.log if isinstance(e, Degraded)]
    assert any("scripts no director" in d and "--director scripted:" in d for d in details), details


async def test_one_mapping_file_serves_both_roles_from_one_instance() -> None:
    talker = llm_from_uri(f"scripted:{CALL}", role="talker")
    forced = {"type": "function", "function": {"name": "record_verdict"}}
    chunks = [c async for c in talker.chat(chat_ctx=llm.ChatContext.empty(), tool_choice=forced)]
    (call,) = [t for c in chunks if c.delta for t in c.delta.tool_calls]
    assert json.loads(call.arguments) == {"advance": "table.collect"}
    assert talker.remaining == len(load_script(CALL, "talker"))  # its own list untouched
    chunks = [c async for c in talker.chat(chat_ctx=llm.ChatContext.empty())]
    assert "".join(c.delta.content or "" for c in chunks if c.delta).startswith("Osteria Lume")


async def test_replay_asks_any_model_uri_through_the_livekit_adapter() -> None:
    from fake_openai_server import FakeOpenAIServer

    log = EventLog.from_jsonl(await _scripted_call_log())
    verdicts = load_script(CALL, "director")
    async with FakeOpenAIServer(director=verdicts) as server:
        director = director_from_uri(f"{server.base_url}#fake-director")
        try:
            report = await replay(log, Playbook.load(PLAYBOOK), director)
        finally:
            await director.llm.aclose()
    assert len(report.turns) == 5 and not report.has_drift, report.to_json()
    assert len(server.director_requests) == 5
    # each request is the turn as the caller saw it: the transcript ends at their words
    last = server.director_requests[-1]["messages"][-1]["content"]
    assert last.rstrip().endswith('caller: "yes, that\'s right"')


async def _scripted_call_log() -> str:
    from superdialog_core import Runtime
    from superdialog_core.roles.scripts import scripted_caller, scripted_talker

    rt = Runtime(Playbook.load(PLAYBOOK), scripted_director(CALL), scripted_talker(CALL), now=NOW,
                 barrier_timeout=2.0)
    await rt.start()
    caller = scripted_caller(CALL)
    while (line := caller.next_line()) is not None:
        await rt.user_turn(line)
    await rt.wait_idle()
    return rt.log.to_jsonl()
