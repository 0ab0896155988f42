"""``superdialog-livekit chat`` with piped turns, offline, on the real local model (the default).

The README's one-command try-out: two piped caller lines, replies from SmolLM2-135M for both
roles, and beside each reply what changed (the opening's checkpoint entry, each verdict).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.local_model

ROOT = Path(__file__).resolve().parents[1]


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("superdialog-livekit")
    return [str(script)] if script.exists() else [sys.executable, "-m", "superdialog_livekit"]


def test_piped_chat_prints_replies_and_what_changed() -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "TALKER_MODEL", "DIRECTOR_MODEL", "SUPERDIALOG_LLM_BASE_URL")}
    env["COLUMNS"] = "200"  # one row per reply: rich wraps table cells at the terminal width
    proc = subprocess.run(
        [*_cli(), "chat", "playbooks/dental_booking.yaml"],
        input="hi\nI would like a check-up\n", capture_output=True, text=True, cwd=ROOT,
        env=env, timeout=400, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "talker: local/smollm2-135m  director: local/smollm2-135m" in proc.stderr
    assert "python tools from" in proc.stderr and "create_visit" in proc.stderr

    lines = out.splitlines()
    agent = [line for line in lines if line.startswith("agent:")]
    you = [line for line in lines if line.startswith("you:")]
    assert you == ["you: hi", "you: I would like a check-up"]
    assert len(agent) >= 3, out  # the opening, then one reply per piped line
    # The opening is the playbook's verbatim line; the replies are the model's own words.
    assert agent[0].startswith("agent: Brightsmile Dental, this is Lena.")
    for line in agent[1:3]:
        reply = re.split(r"\s{2,}", line[len("agent:"):].strip())[0]
        assert reply and reply != "(silence)", line
    # What changed, beside the replies: entering the first checkpoint, and one verdict a turn.
    assert "→ visit.greet (init, by init)" in agent[0]
    assert out.count("director: ") >= 2, out
    assert not re.search(r"degraded director: (no verdict|unparseable|API|bad_field)", out), out
    assert lines[-1].startswith("checkpoint: visit.")
