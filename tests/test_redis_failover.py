"""Worker failover for real (SPEC §11): a process running a call on Redis is SIGKILLed, once
between turns and once in the middle of a reply; a second process resumes the same session.

The stored log must be intact (every acknowledged event there, none doubled, versions 1..N),
the opening is not replayed, the call goes on from the checkpoint it was at, and the booking
made before the kill is not booked twice: the tool sends an Idempotency-Key derived from the
session and the log version, and the loopback booking server counts bookings by that key.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loopback import LoopbackServer, RecordedRequest, Reply
from redis_server import RedisServer
from superdialog_core import EventLog
from superdialog_core.events import ToolCall, Utterance
from superdialog_core.log.redis_store import RedisStore

HERE = Path(__file__).resolve().parent
SESSION = "room-failover-1"


class BookingServer:
    """The clinic's booking API: one booking per Idempotency-Key, like a real one."""

    def __init__(self, server: LoopbackServer) -> None:
        self.server = server
        self.bookings: dict[str, Any] = {}
        self._lock = threading.Lock()
        server.route("POST", "/bookings", handler=self._book)

    def _book(self, request: RecordedRequest) -> Reply:
        key = request.header("Idempotency-Key")
        if key is None:
            return Reply(400, json={"error": "Idempotency-Key required"})
        with self._lock:
            self.bookings.setdefault(key, {"ref": f"B{len(self.bookings) + 1}", **request.json})
            return Reply(201, json=self.bookings[key])

    @property
    def posts(self) -> int:
        return len(self.server.requests_to("/bookings", "POST"))


class CallProcess:
    """``tests/failover_call.py`` in its own process, read line by line off its stdout."""

    def __init__(self, url: str, booking_base: str, *, stall_on: str = "") -> None:
        env = {**os.environ, "BOOKING_BASE": booking_base, "STALL_ON": stall_on,
               "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "failover_call.py"), url, SESSION],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
            text=True,
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(json.loads(line))

    def next(self, key: str, timeout: float = 30.0) -> dict[str, Any]:
        """The next message carrying ``key`` (others before it are skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                message = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                self.kill()
                err = self.process.stderr.read() if self.process.stderr else ""
                raise AssertionError(f"no {key!r} from the call process; stderr:\n{err}") from None
            if key in message:
                return message

    def turn(self, text: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def close(self) -> None:
        if self.process.poll() is None and self.process.stdin is not None:
            self.process.stdin.close()
            self.process.wait(timeout=30)
        self.kill()


@pytest.fixture
def setting(tmp_path: Path) -> Iterator[tuple[RedisServer, BookingServer]]:
    with RedisServer(tmp_path / "redis") as redis, LoopbackServer() as http:
        yield redis, BookingServer(http)


async def stored(url: str) -> EventLog:
    store = RedisStore(url)
    try:
        log = await store.load(SESSION)
    finally:
        await store.aclose()
    assert log is not None
    return log  # EventLog itself refuses versions that are not 1..N


def sha(log: EventLog) -> str:
    return hashlib.sha256(log.to_jsonl().encode()).hexdigest()


def user_lines(log: EventLog) -> list[str]:
    return [e.text for e in log if isinstance(e, Utterance) and e.role == "user"]


async def test_killed_between_turns_the_next_worker_goes_on(setting) -> None:
    redis, booking = setting
    first = CallProcess(redis.url, booking.server.base_url)
    try:
        started = first.next("started")
        assert started["started"].startswith("Northside clinic")
        first.turn("This is Ada Lovelace")
        first.next("done")
        first.turn("Next Tuesday please")
        acknowledged = first.next("done")
        assert acknowledged["checkpoint"] == "visit.wrap_up" and booking.posts == 1
    finally:
        first.kill()  # SIGKILL between turns: everything acknowledged must be in Redis

    log = await stored(redis.url)
    assert log.version == acknowledged["version"] and sha(log) == acknowledged["sha256"]

    second = CallProcess(redis.url, booking.server.base_url)
    try:
        resumed = second.next("started")
        assert resumed["started"] == ""  # the opening is not replayed
        assert resumed["version"] == acknowledged["version"]
        assert resumed["checkpoint"] == "visit.wrap_up"  # where the call was
        second.turn("No that is all")
        finished = second.next("done")
        assert finished["ended"] and finished["checkpoint"] == "visit.done"
    finally:
        second.close()

    log = await stored(redis.url)
    assert sha(log) == finished["sha256"]
    assert user_lines(log) == ["This is Ada Lovelace", "Next Tuesday please", "No that is all"]
    assert [e.tool for e in log if isinstance(e, ToolCall)] == ["book_visit"]
    assert booking.posts == 1 and len(booking.bookings) == 1


async def test_killed_during_a_reply_the_turn_is_redone_and_booked_once(setting) -> None:
    redis, booking = setting
    first = CallProcess(redis.url, booking.server.base_url, stall_on="Next Tuesday please")
    try:
        first.next("started")
        first.turn("This is Ada Lovelace")
        before = first.next("done")
        first.turn("Next Tuesday please")
        first.next("piece")  # the reply is streaming (and stalls once the decision is in) ...
        deadline = time.monotonic() + 20
        while booking.posts == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert booking.posts == 1  # ... and the booking went out
    finally:
        first.kill()  # SIGKILL in the middle of the reply

    log = await stored(redis.url)
    # The turn was never acknowledged: the stored log is the one acknowledged before it.
    assert log.version == before["version"] and sha(log) == before["sha256"]

    second = CallProcess(redis.url, booking.server.base_url)
    try:
        resumed = second.next("started")
        assert resumed["started"] == "" and resumed["checkpoint"] == "visit.day"
        second.turn("Next Tuesday please")  # the caller says it again to the new worker
        redone = second.next("done")
        assert redone["checkpoint"] == "visit.wrap_up"
        second.turn("No that is all")
        finished = second.next("done")
        assert finished["ended"]
    finally:
        second.close()

    log = await stored(redis.url)
    assert sha(log) == finished["sha256"]
    assert user_lines(log) == ["This is Ada Lovelace", "Next Tuesday please", "No that is all"]
    assert [e.tool for e in log if isinstance(e, ToolCall)] == ["book_visit"]
    keys = {r.header("Idempotency-Key") for r in booking.server.requests_to("/bookings", "POST")}
    assert booking.posts == 2 and len(keys) == 1  # sent twice, with one key ...
    assert len(booking.bookings) == 1  # ... so booked once
