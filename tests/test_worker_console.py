"""``python worker.py console --text`` through a pseudo-terminal, against a fake model server.

The worker runs as a user runs it: its own process, its prewarm and job entry (LiveKit's
console mode simulates one job in a mock room, no LiveKit server), the real playbook
``playbooks/dental_booking.yaml`` with its sidecar python tools, and both models pointed at
``tests/fake_openai_server.py`` on 127.0.0.1 through ``SUPERDIALOG_LLM_BASE_URL``. The pty is
the process's controlling terminal (``setsid -c``), so Ctrl-C is the terminal's SIGINT.

Console mode imports ``sounddevice`` even in text mode: it needs the PortAudio library
(``apt-get install -y libportaudio2``; ``.ci/run`` installs it).
"""

from __future__ import annotations

import asyncio
import ctypes.util
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from superdialog_core import JsonlStore, Playbook
from superdialog_core.events import SessionEnd, ToolResult

from tests.fake_openai_server import FakeOpenAIServerThread

ROOT = Path(__file__).resolve().parents[1]
PLAYBOOK = ROOT / "playbooks" / "dental_booking.yaml"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][0-9A-B]|\r")
PROMPT = "Type to talk to your agent"


@pytest.fixture(scope="module", autouse=True)
def _portaudio() -> None:
    if ctypes.util.find_library("portaudio") is None:
        pytest.fail("console mode needs the PortAudio library: apt-get install -y libportaudio2")
    if shutil.which("setsid") is None:
        pytest.fail("these tests need setsid (util-linux) to give the worker a terminal")


class Console:
    """The worker in console text mode on a pty: read what it prints, type lines into it."""

    def __init__(self, env: dict[str, str]) -> None:
        master, slave = pty.openpty()
        self.process = subprocess.Popen(
            ["setsid", "-c", sys.executable, "worker.py", "console", "--text"],
            cwd=ROOT, stdin=slave, stdout=slave, stderr=slave, env=env,
        )
        os.close(slave)
        self._fd = master
        self.text = ""

    def _pump(self, timeout: float) -> None:
        ready, _, _ = select.select([self._fd], [], [], timeout)
        if ready:
            try:
                data = os.read(self._fd, 65536)
            except OSError:  # the worker exited: the pty is closed
                return
            self.text += _ANSI.sub("", data.decode(errors="replace"))

    def wait_for(self, needle: str, timeout: float, start: int = 0) -> int:
        """Where ``needle`` appears in the output after ``start``; fails after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            at = self.text.find(needle, start)
            if at >= 0:
                return at
            if self.process.poll() is not None:
                self._pump(0.1)
                if (at := self.text.find(needle, start)) >= 0:
                    return at
                pytest.fail(f"the worker exited ({self.process.returncode}) before printing "
                            f"{needle!r}:\n{self.tail()}")
            self._pump(0.1)
        pytest.fail(f"no {needle!r} within {timeout} s:\n{self.tail()}")

    def say(self, line: str, timeout: float = 60.0) -> int:
        """Type ``line`` and Enter at the prompt; returns where the worker echoed it.

        The prompt flushes keys typed before it reads (LiveKit's readchar uses TCSAFLUSH), so
        a line typed too early is lost: wait for the prompt, and type again if no echo comes.
        """
        start = len(self.text)
        for _ in range(5):
            self.wait_for(PROMPT, timeout, start)
            time.sleep(0.3)
            os.write(self._fd, line.encode() + b"\r")
            try:
                return self.wait_for(f"You\n    {line}", 5.0, start)
            except pytest.fail.Exception:
                start = len(self.text)
        pytest.fail(f"the console never took the line {line!r}:\n{self.tail()}")

    def tail(self, chars: int = 4000) -> str:
        """The end of the output without the prompt's redraws (it repaints 30 times a second)."""
        noise = (PROMPT, "for shortcuts", "\u2500" * 10)
        lines = [line for line in self.text.splitlines() if not any(n in line for n in noise)]
        return "\n".join(lines)[-chars:]

    def wait_exit(self, timeout: float) -> int:
        """The worker's exit code; fails (with what it printed) if it runs on past ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            self._pump(0.1)
        if self.process.poll() is None:
            pytest.fail(f"the worker still runs {timeout} s later:\n{self.tail()}")
        return self.process.returncode

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        os.close(self._fd)


@pytest.fixture
def console_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIVEKIT_", "SUPERDIALOG_"))}
    env.update({
        "OPENAI_API_KEY": "sk-test",  # the STT/TTS clients want a key; text mode never calls them
        "PLAYBOOK": str(PLAYBOOK),
        "TALKER_MODEL": "openai/fake-talker",
        "SUPERDIALOG_LOG_DIR": str(tmp_path / "logs"),
        "SUPERDIALOG_CALL_START": '{"clinic_id": "berlin-1"}',
        "COLUMNS": "200", "LINES": "50", "TERM": "xterm",
    })
    yield env


def _wait_outcome(log_dir: Path, timeout: float) -> tuple[str | None, list[Any]]:
    """The call's outcome from its JSONL log (the worker's store), once its end is stored."""
    deadline = time.monotonic() + timeout
    events: list[Any] = []
    while time.monotonic() < deadline:
        files = list(log_dir.glob("*.jsonl"))
        assert len(files) <= 1, files
        log = asyncio.run(JsonlStore(log_dir).load(files[0].stem)) if files else None
        events = list(log or [])
        ends = [e for e in events if isinstance(e, SessionEnd)]
        if ends:
            return ends[-1].outcome, events
        time.sleep(0.2)
    return None, events


@pytest.mark.parametrize("stop", ["SIGTERM", "Ctrl-C"])
def test_console_text_mode_replies_and_stops_cleanly(console_env: dict[str, str], stop: str) -> None:
    with FakeOpenAIServerThread(talker=["Of course, happy to help."], director=[{}]) as models:
        console_env["SUPERDIALOG_LLM_BASE_URL"] = models.base_url
        console = Console(console_env)
        try:
            console.wait_for("Brightsmile Dental, this is Lena.", 120)
            echoed = console.say("Hi, I'd like to book a check-up.")
            console.wait_for("Of course, happy to help.", 60, echoed)
            if stop == "SIGTERM":
                console.process.send_signal(signal.SIGTERM)
            else:
                os.write(console._fd, b"\x03")  # the terminal turns it into SIGINT
            code = console.wait_exit(5)
        finally:
            console.close()
    assert code == 0, console.tail()
    assert "Plugins must be registered on the main thread" not in console.text
    assert models.talker_requests and models.director_requests


def test_the_worker_job_books_the_dental_call(console_env: dict[str, str], tmp_path: Path) -> None:
    """Prewarm and job entry as shipped: the sidecar's python tool books; outcome ``booked``."""
    day = (datetime.now(ZoneInfo("Europe/Berlin")) + timedelta(days=7)).date().isoformat()
    talker = ["Of course.", "May I have your name, phone and a day?", "Thank you.",
              f"Anna Schmidt, +49 151 12345678, {day} at 10:00. Is that right?"]
    director: list[Any] = [
        {"advance": "visit.details"},
        {"slots": {"patient_name": "Anna Schmidt", "phone": "+4915112345678", "day": day,
                   "time": "10:00", "reason": "checkup"}},
        {"confirm": ["patient_name", "phone", "day", "time"], "advance": "visit.book"},
    ]
    with FakeOpenAIServerThread(talker=talker, director=director) as models:
        console_env["SUPERDIALOG_LLM_BASE_URL"] = models.base_url
        console = Console(console_env)
        try:
            console.wait_for("Brightsmile Dental, this is Lena.", 120)
            at = console.say("Hi, I'd like to book a check-up.")
            at = console.wait_for("May I have your name, phone and a day?", 60, at)
            at = console.say("Anna Schmidt, 0151 12345678, next Tuesday at ten, a check-up.")
            at = console.wait_for("Is that right?", 60, at)
            at = console.say("Yes, that's all correct.")
            console.wait_for("You're booked, Anna Schmidt", 60, at)
            # The call ended (DialogAgent ends the job); console mode itself runs on until
            # stopped, as after any job.
            outcome, log = _wait_outcome(tmp_path / "logs", 30)
            console.process.send_signal(signal.SIGTERM)
            code = console.wait_exit(5)
        finally:
            console.close()
    assert code == 0, console.tail()
    assert outcome == "booked", [type(e).__name__ for e in log]
    booked = [e for e in log if isinstance(e, ToolResult) and e.tool == "create_visit"]
    assert len(booked) == 1 and booked[0].ok, booked
    assert Playbook.load(PLAYBOOK).tools[0].id == "create_visit"  # the sidecar's tool, by id


async def test_the_job_passes_the_sidecar_tools_and_refuses_a_call_without_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In process: ``prepare_call`` gets the sidecar's tools; without them the call is refused
    before the greeting (ConfigError naming the tool), never a call that cannot book."""
    import json

    from livekit.agents.testing import fake_job_context
    from superdialog_core.errors import ConfigError

    sys.path.insert(0, str(ROOT))
    import worker

    monkeypatch.delenv("SUPERDIALOG_TOOLS", raising=False)
    env = {"PLAYBOOK": str(PLAYBOOK), "TALKER_MODEL": "http://127.0.0.1:9/v1#fake",
           "SUPERDIALOG_LOG_DIR": str(tmp_path / "logs")}
    playbook = worker.load_playbook(env)
    meta = json.dumps({"call_start": {"clinic_id": "berlin-1"}})
    with fake_job_context(job_metadata=meta) as ctx:
        dialog = worker.prepare_call(ctx, playbook, None, env=env)
    assert sorted(dialog._options["python_tools"]) == ["create_visit"]

    lone = tmp_path / "dental_booking.yaml"  # the same playbook without its sidecar
    lone.write_text(PLAYBOOK.read_text())
    env["PLAYBOOK"] = str(lone)
    with fake_job_context(job_metadata=meta) as ctx, pytest.raises(ConfigError) as info:
        worker.prepare_call(ctx, worker.load_playbook(env), None, env=env)
    assert "'create_visit' has no implementation" in str(info.value)
    assert str(tmp_path / "dental_booking_tools.py") in str(info.value)
