"""A local model server that dies is a clear error, not a conversation (issue 12).

The servers here are real processes on 127.0.0.1 (``tests/fake_llama_server.py``, a small
OpenAI-compatible server that can kill itself with SIGILL on its N-th completion, as llama.cpp
built for instructions the CPU lacks does), started and watched by ``superdialog_livekit.local``
itself: only the command line differs from the llama.cpp one. ``local/<file>.gguf`` URIs then
find the running server for their role, as ``chat`` and ``DialogMachineLLM`` do.
"""

from __future__ import annotations

import io
import logging
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from livekit.agents import AgentSession
from superdialog_core.events import Degraded, Utterance

from superdialog_livekit import DialogAgent, DialogMachineLLM, cli, local
from tests.livekit_scripted import TalkerLLM

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fake_llama_server.py"
PLAYBOOK = ROOT / "playbooks" / "dental_booking.yaml"


def fake_server(die_on: int = 0, sig: str = "SIGILL") -> local.Command:
    """The command for ``local_server(command=...)``: the fake server, dying on request ``die_on``."""
    def command(path: Path, port: int) -> list[str]:
        return [sys.executable, str(FAKE), "--port", str(port), "--die-on", str(die_on),
                "--signal", sig]
    return command


@pytest.fixture
def model(tmp_path: Path) -> Iterator[Path]:
    """A model file name for ``local/...`` URIs; the servers started for it stop afterwards."""
    path = tmp_path / "fake-model.gguf"
    path.write_bytes(b"GGUF")  # only its name matters: the fake server never reads it
    yield path
    for (model_path, _), server in list(local._servers.items()):
        if model_path == path.resolve():
            server.stop()
            server.log_path.unlink(missing_ok=True)  # a dead server's log is kept: not here


def test_exit_statuses_are_told_in_words_with_the_fix_for_sigill() -> None:
    for status in (-signal.SIGILL, 128 + signal.SIGILL):  # Popen's form, and a shell's (132)
        text = local.describe_exit(status)
        assert "SIGILL" in text and "instructions this machine lacks" in text, text
        assert "./setup.sh" in text and "GGML_NATIVE=OFF" in text, text
    assert local.describe_exit(-signal.SIGKILL) == "was killed by SIGKILL (exit status -9)"
    assert local.describe_exit(3) == "exited with code 3"


def test_the_one_token_self_test_catches_a_server_that_dies_on_its_first_completion(
    model: Path,
) -> None:
    with pytest.raises(local.LocalServerDied) as info:
        local.local_server(str(model), instance="talker", command=fake_server(die_on=1))
    died = info.value
    assert died.returncode == -signal.SIGILL
    assert "for talker" in str(died) and "SIGILL" in str(died) and "./setup.sh" in str(died)
    details = died.details()
    assert "completion request 1" in details and "dying with SIGILL" in details, details
    assert died.server.log_path.is_file()  # the log that explains it is kept
    died.server.log_path.unlink()
    # Nothing half-started is left for a later call to reuse.
    assert (model.resolve(), "talker") not in local._servers


def test_chat_stops_with_the_cause_when_the_local_talker_dies_mid_conversation(
    model: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    # The talker's server answers its self-test (request 1) and the first reply (2), then
    # dies with SIGILL on the second caller turn's reply (3). The director's keeps answering.
    local.local_server(str(model), instance="talker", command=fake_server(die_on=3))
    local.local_server(str(model), instance="director", command=fake_server())
    monkeypatch.setattr(sys, "stdin", io.StringIO("hi\nI need a check-up\nAnna Schmidt\n"))
    monkeypatch.delenv("SUPERDIALOG_TOOLS", raising=False)
    uri = f"local/{model}"

    code = cli.main(["chat", str(PLAYBOOK), "--talker", uri, "--director", uri])

    out, err = capsys.readouterr()
    assert code == 1, (out, err)
    assert "for talker" in err and "was killed by SIGILL" in err, err
    assert "instructions this machine lacks" in err and "./setup.sh" in err, err
    assert "dying with SIGILL" in err, err  # the last lines of the server's log
    lines = out.splitlines()
    # The opening and the first reply were shown; the turn the server died in shows no reply
    # (least of all "say that again"), and chat read no further line.
    assert [line for line in lines if line.startswith("you:")] == ["you: hi", "you: I need a check-up"]
    assert len([line for line in lines if line.startswith("agent:")]) == 2, out
    assert "say that again" not in out
    assert not any(line.startswith("checkpoint:") for line in lines), out


async def test_a_dead_local_director_is_a_degraded_event_and_a_warning(
    model: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    # Request 1 is the self-test; the first Director call (2) kills the server.
    local.local_server(str(model), instance="director", command=fake_server(die_on=2))
    dialog = DialogMachineLLM(PLAYBOOK, talker=TalkerLLM(["Sure."]), director=f"local/{model}",
                              call={"channel": "web"}, director_timeout=30.0)
    with caplog.at_level(logging.WARNING, logger="superdialog_livekit.local"):
        async with AgentSession(llm=dialog, vad=None, turn_handling={"turn_detection": None},
                                user_away_timeout=None) as session:
            await session.start(DialogAgent(dialog, on_end="none"))
            await session.run(user_input="hi")
            await dialog.runtime.wait_idle()
            await session.run(user_input="I need a check-up")
            await dialog.runtime.wait_idle()
    log = list(dialog.runtime.log)
    director = [e.detail for e in log if isinstance(e, Degraded) and e.component == "director"]
    assert len(director) == 2, director  # each turn's call says why, none waits for a timeout
    assert all("LocalServerDied" in d and "for director" in d and "SIGILL" in d for d in director)
    warnings = [r.getMessage() for r in caplog.records if r.name == "superdialog_livekit.local"]
    assert len(warnings) == 1 and "was killed by SIGILL" in warnings[0], warnings
    await dialog.aclose()


async def test_a_dead_local_talker_fails_its_call_with_the_cause(model: Path) -> None:
    local.local_server(str(model), instance="talker", command=fake_server(die_on=2))
    dialog = DialogMachineLLM(PLAYBOOK, talker=f"local/{model}", director=_NoVerdict(),
                              call={"channel": "web"})
    async with AgentSession(llm=dialog, vad=None, turn_handling={"turn_detection": None},
                            user_away_timeout=None) as session:
        await session.start(DialogAgent(dialog, on_end="none"))
        await session.run(user_input="hi")  # request 2: the server dies mid-request
        await dialog.runtime.wait_idle()
        await session.run(user_input="hello?")  # known dead: refused before any request
        await dialog.runtime.wait_idle()
    talker = [e.detail for e in dialog.runtime.log
              if isinstance(e, Degraded) and e.component == "talker"]
    assert len(talker) == 2, talker
    assert all(d.startswith("LocalServerDied") and "SIGILL" in d for d in talker), talker
    assert "./setup.sh" in talker[0]
    assert any(isinstance(e, Utterance) and e.role == "user" for e in dialog.runtime.log)
    await dialog.aclose()


class _NoVerdict:
    """A Director with nothing to record (an engine model: ``decide`` only)."""

    async def decide(self, request: Any) -> dict[str, Any]:
        return {}


@pytest.mark.local_model
def test_a_real_llama_cpp_server_killed_mid_call_is_reported_with_its_log() -> None:
    """The real llama.cpp server (SmolLM2): it passes the self-test, then SIGILL kills it."""
    server = local.local_server("smollm2-135m", instance="sigill-test")
    try:
        assert server.running and server.died() is None
        server.process.send_signal(signal.SIGILL)
        assert server.wait_exit(10) == -signal.SIGILL
        dead = [d for d in local.dead_servers() if d.server is server]
        assert len(dead) == 1
        assert "for sigill-test" in str(dead[0]) and "./setup.sh" in str(dead[0])
        assert "llama" in dead[0].details().lower()  # the tail of llama.cpp's own log
    finally:
        server.stop()
        server.log_path.unlink(missing_ok=True)
