"""Replay with the real local model (SmolLM2-135M on llama.cpp, 127.0.0.1) is stable.

The logged scripted call of ``test_replay.py`` is replayed twice with ``--director
local/smollm2-135m`` (greedy decoding, a fixed date anchor from the log): both runs print the
same report byte for byte, the second one on the server's warm prompt cache. What a 135M model
decides is not asserted, only that each turn was asked and answered the same way twice.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from superdialog_core import Playbook, Runtime
from superdialog_core.roles.scripts import scripted_caller, scripted_director, scripted_talker
from test_replay import CALL, NOW, PLAYBOOK

from superdialog_livekit.cli import main
from superdialog_livekit.uris import llm_from_uri

pytestmark = pytest.mark.local_model

MODEL = "local/smollm2-135m"


@pytest.fixture(scope="module")
def director_server() -> Any:
    """The director-role server replay starts; stopped once the module is done."""
    server = llm_from_uri(MODEL, role="director").local_server
    yield server
    server.stop()


def test_replay_with_a_local_model_prints_the_same_report_twice(
        director_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def call() -> str:
        rt = Runtime(Playbook.load(PLAYBOOK), scripted_director(CALL), scripted_talker(CALL),
                     now=NOW, barrier_timeout=2.0)
        await rt.start()
        caller = scripted_caller(CALL)
        while (line := caller.next_line()) is not None:
            await rt.user_turn(line)
        await rt.wait_idle()
        return rt.log.to_jsonl()

    log = tmp_path / "call.jsonl"
    log.write_text(asyncio.run(call()))
    argv = ["replay", str(log), str(PLAYBOOK), "--director", MODEL, "--json"]
    first_code = main(argv)
    first, _ = capsys.readouterr()
    second_code = main(argv)
    second, _ = capsys.readouterr()
    assert first == second
    assert first_code == second_code and first_code in (0, 1)
    report = json.loads(first)
    assert len(report["turns"]) == 5
    # every turn reached the model: a verdict, or the Director's own failure, never a crash
    for turn in report["turns"]:
        assert turn["replayed"]["error"] is None
        assert turn["replayed"]["verdict"] is not None or turn["replayed"]["degraded"]
