"""SIGTERM ends `superdialog-livekit` as an exit: atexit runs, so the llama.cpp servers that
`local/...` URIs started are stopped (the default action would kill the CLI and leave them)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.paths import ROOT

_CHILD = r"""
import atexit, sys
from pathlib import Path
marker = Path(sys.argv[1])
atexit.register(marker.write_text, "stopped")  # stands where local.py's _stop_all is registered
from superdialog_livekit.cli import main
sys.exit(main(["chat", sys.argv[2], "--talker", "scripted:" + sys.argv[3],
               "--director", "scripted:" + sys.argv[3]]))
"""


def test_sigterm_runs_the_exit_handlers(tmp_path: Path) -> None:
    marker = tmp_path / "atexit"
    script = ROOT / "tests" / "fixtures" / "scripts" / "replay_call.yaml"
    playbook = ROOT / "tests" / "fixtures" / "replay_booking.yaml"
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(marker), str(playbook), str(script)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    try:
        assert child.stdout is not None
        child.stdout.readline()  # the opening: chat is up and waiting for the caller's line
        time.sleep(0.2)
        child.send_signal(signal.SIGTERM)
        code = child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert code == 128 + signal.SIGTERM, child.stderr.read().decode() if child.stderr else code
    assert marker.read_text() == "stopped"
