"""The README's code runs: its quick-start and its tutorial playbook, read from README.md.

The blocks are extracted from the README itself (so they cannot drift) and run as a user would:
the quick-start as a script in the repository with ``OPENAI_BASE_URL`` pointed at the fake
OpenAI-compatible server on 127.0.0.1, the tutorial's ``playbooks/callback.yaml`` through
``superdialog-livekit validate`` and ``chat`` with model URIs naming the same server.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai_server import FakeOpenAIServerThread

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def _block(lang: str, first_line: str) -> str:
    """The README's ``lang`` code block whose first line is ``first_line``."""
    found = [body for kind, body in _BLOCK.findall(README)
             if kind == lang and body.splitlines()[0].strip() == first_line]
    assert len(found) == 1, f"README.md has {len(found)} {lang} blocks starting {first_line!r}"
    return found[0]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "SUPERDIALOG_", "LIVEKIT_"))
           and k not in ("TALKER_MODEL", "DIRECTOR_MODEL")}
    env.update(extra)
    env["COLUMNS"] = "200"  # rich wraps table cells at the terminal width
    return env


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("superdialog-livekit")
    return [str(script)] if script.exists() else [sys.executable, "-m", "superdialog_livekit"]


def test_the_quick_start_runs_in_text_mode(tmp_path: Path) -> None:
    code = _block("python", "# quickstart.py: a playbook in a real LiveKit AgentSession, "
                            "text mode (no room, no audio)")
    assert "..." not in code  # no placeholders left to fill in
    script = tmp_path / "quickstart.py"
    script.write_text(code)
    with FakeOpenAIServerThread(talker=["Of course.", "May I have your name?", "Thanks, Anna."],
                     director=[{"advance": "visit.details"}, {"slots": {"patient_name": "Anna Schmidt"}}],
                     ) as models:
        done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True,
                              text=True, timeout=180,
                              env=_env(OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=models.base_url))
        assert done.returncode == 0, done.stderr[-3000:]
        requests = list(models.requests)
    lines = done.stdout.splitlines()
    assert lines[0] == "agent: Brightsmile Dental, this is Lena. How can I help?"
    assert lines[1] == "you:   Hi, I'd like to book a check-up."
    assert lines[2] == "agent: Of course. May I have your name?"  # reply, then follow-through
    assert lines[3].startswith("you:   Anna Schmidt")
    assert lines[4] == "agent: Thanks, Anna."
    # Both models went to the server the environment named, under the README's model names.
    assert {r["model"] for r in requests} == {"gpt-4.1-mini", "gpt-4.1"}


@pytest.fixture
def callback_playbook(tmp_path: Path) -> Path:
    text = _block("yaml", "# playbooks/callback.yaml")
    path = tmp_path / "playbooks" / "callback.yaml"
    path.parent.mkdir()
    path.write_text(text)
    return path


def test_the_tutorial_playbook_validates_and_chats(callback_playbook: Path) -> None:
    # §2: the README's validate command (run where the README puts the file).
    validate = _block("bash", ".venv/bin/superdialog-livekit validate playbooks/callback.yaml"
                              "   # every problem, with its path")
    assert "validate playbooks/callback.yaml" in validate
    checked = subprocess.run([*_cli(), "validate", "playbooks/callback.yaml"],
                             cwd=callback_playbook.parent.parent, capture_output=True, text=True,
                             timeout=120, env=_env())
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "✓ playbooks/callback.yaml" in checked.stdout

    # §3: chat with it, the two roles on the fake server by model URI.
    assert ".venv/bin/superdialog-livekit chat playbooks/callback.yaml" in _block(
        "bash", ".venv/bin/superdialog-livekit chat playbooks/callback.yaml")
    verdicts: list[Any] = [
        {},
        {"slots": {"callback_day": "Tuesday", "callback_time": "10:00"}, "advance": "main.close"},
    ]
    talker = ["Which day and time suit you?", "Tuesday at ten it is. Thank you, goodbye!"]
    with FakeOpenAIServerThread(talker=talker, director=verdicts) as models:
        uri = f"{models.base_url}#fake"
        done = subprocess.run(
            [*_cli(), "chat", "playbooks/callback.yaml", "--talker", uri, "--director", uri],
            cwd=callback_playbook.parent.parent, input="hello\nTuesday at ten, please\n",
            capture_output=True, text=True, timeout=180, env=_env(),
        )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "Which day and time suit you?" in out
    assert "slot callback_day = 'Tuesday'" in out and "→ main.close" in out, out
    assert out.splitlines()[-1] == "checkpoint: main.close  ended: True  outcome: callback_booked"
