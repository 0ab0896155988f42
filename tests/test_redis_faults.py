"""Redis lost mid-call, and two workers on one call (SPEC §11): the call goes on while the
store is retried with backoff, the stored log catches up, past ``policies.store_failure`` the
call speaks its failure line and ends, and a second writer gets ``StoreConflict``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback import LoopbackServer, Reply
from redis_server import RedisServer
from superdialog_core import Playbook, Runtime, ScriptedDirector, ScriptedTalker, StoreConflict
from superdialog_core.events import SessionEnd, Utterance
from superdialog_core.log.redis_store import RedisStore

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "failover_booking.yaml"
VERDICTS = [{"slots": {"name": "Ada Lovelace"}, "advance": "visit.day"},
            {"slots": {"day": "next Tuesday"}, "advance": "visit.book"}]
LINE = "Sorry, our system is down. Please call back. Goodbye."


@pytest.fixture
def booking(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackServer]:
    with LoopbackServer() as server:
        server.route("POST", "/bookings", Reply(201, json={"ref": "B1"}))
        monkeypatch.setenv("BOOKING_BASE", server.base_url)
        yield server


def playbook(after: int | None = None) -> Playbook:
    text = FIXTURE.read_text()
    if after is not None:
        text = text.replace("policies:\n", f"policies:\n  store_failure: {{after: {after}, line: {LINE!r}}}\n")
    return Playbook.from_yaml(text)


async def until(predicate, seconds: float = 10.0) -> None:
    for _ in range(int(seconds / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached in time")


async def test_redis_lost_mid_call_the_call_goes_on_and_the_log_catches_up(
        redis_server: RedisServer, booking: LoopbackServer, caplog: pytest.LogCaptureFixture) -> None:
    store = RedisStore(redis_server.url, timeout=1.0)
    rt = Runtime(playbook(), ScriptedDirector(VERDICTS), ScriptedTalker(["Hi Ada.", "Which day?", "Booked."]),
                 store=store, session_id="lost-1")
    try:
        await rt.start()
        await rt.user_turn("This is Ada Lovelace")
        await rt.wait_idle()
        redis_server.stop()  # Redis is lost mid-call
        with caplog.at_level(logging.WARNING, logger="superdialog_core.runtime"):
            turn = await rt.user_turn("Next Tuesday please")
            assert turn.text and rt.state.checkpoint == "visit.wrap_up"  # the call goes on
            await until(lambda: sum("storing events" in r.getMessage() for r in caplog.records) >= 2)
            redis_server.start()  # back, with its data (AOF, appendfsync always)
            await asyncio.wait_for(rt.wait_idle(), 10)
        failed = [r.getMessage() for r in caplog.records if "storing events" in r.getMessage()]
        assert all(f"redis://127.0.0.1:{redis_server.port}/0" in m for m in failed)  # names the URL
        assert any("answers again" in r.getMessage() for r in caplog.records)
        stored = await store.load("lost-1")
        assert stored is not None and stored.to_jsonl() == rt.log.to_jsonl()  # caught up
        assert not rt.ended
    finally:
        await store.aclose()


async def test_past_store_failure_the_call_speaks_its_line_and_ends(
        redis_server: RedisServer, booking: LoopbackServer) -> None:
    store = RedisStore(redis_server.url, timeout=1.0)
    late: list[str] = []
    rt = Runtime(playbook(after=2), ScriptedDirector(VERDICTS), ScriptedTalker(["Hi Ada.", "Which day?"]),
                 store=store, session_id="lost-2", on_late_line=late.append)
    try:
        await rt.start()
        await rt.user_turn("This is Ada Lovelace")
        await rt.wait_idle()
        redis_server.stop()
        await rt.user_turn("Next Tuesday please")
        await until(lambda: rt.ended)  # between turns: the line goes out through on_late_line
        assert late == [LINE] and rt.state.outcome == "error"
        end = [e for e in rt.log if isinstance(e, SessionEnd)]
        assert [e.reason for e in end] == ["store_failure"]
        redis_server.start()
        await asyncio.wait_for(rt.wait_idle(), 15)
        stored = await store.load("lost-2")
        assert stored is not None and stored.to_jsonl() == rt.log.to_jsonl()  # nothing diverged
    finally:
        await store.aclose()


async def test_without_a_late_line_hook_the_next_turn_ends_the_call(
        redis_server: RedisServer, booking: LoopbackServer) -> None:
    store = RedisStore(redis_server.url, timeout=1.0)
    rt = Runtime(playbook(after=1), ScriptedDirector(VERDICTS), ScriptedTalker(["Hi Ada.", "Which day?"]),
                 store=store, session_id="lost-3")
    try:
        await rt.start()
        await rt.wait_idle()
        redis_server.stop()
        await rt.user_turn("This is Ada Lovelace")
        await until(lambda: rt._store_lost())
        turn = await rt.user_turn("Next Tuesday please")
        assert turn.text == LINE and turn.ended and turn.outcome == "error"
        redis_server.start()
        await asyncio.wait_for(rt.wait_idle(), 15)
        said = [e.text for e in await store.load("lost-3") if isinstance(e, Utterance)]
        assert said[-2:] == ["Next Tuesday please", LINE]
    finally:
        await store.aclose()


async def test_a_second_worker_on_the_same_call_gets_store_conflict(
        redis_server: RedisServer, booking: LoopbackServer, caplog: pytest.LogCaptureFixture) -> None:
    store_a, store_b = RedisStore(redis_server.url), RedisStore(redis_server.url)
    try:
        first = Runtime(playbook(), ScriptedDirector(VERDICTS), ScriptedTalker(["Hi."]),
                        store=store_a, session_id="shared")
        await first.start()
        await first.wait_idle()
        # Both workers resume the same stored log (a job re-dispatched while the first lives).
        a = Runtime(playbook(), ScriptedDirector(VERDICTS), ScriptedTalker(["A."]),
                    store=store_a, session_id="shared")
        b = Runtime(playbook(), ScriptedDirector(VERDICTS), ScriptedTalker(["B."]),
                    store=store_b, session_id="shared")
        await a.start()
        await b.start()
        await a.user_turn("This is Ada Lovelace")
        await a.wait_idle()
        with caplog.at_level(logging.ERROR, logger="superdialog_core.runtime"):
            await b.user_turn("This is Ada Lovelace")
            await b.wait_idle()
        assert any("another writer" in r.getMessage() for r in caplog.records)
        with pytest.raises(StoreConflict):
            await b.user_turn("Next Tuesday please")
        stored = await store_a.load("shared")
        assert stored is not None and stored.to_jsonl() == a.log.to_jsonl()  # A's history only
    finally:
        await store_a.aclose()
        await store_b.aclose()


async def test_redis_down_when_a_call_starts_is_an_error_naming_the_url(booking: LoopbackServer) -> None:
    from redis_server import free_port
    from superdialog_core.log.stores import StoreUnavailable

    port = free_port()
    store = RedisStore(f"redis://127.0.0.1:{port}/0", timeout=0.5)
    rt = Runtime(playbook(), ScriptedDirector([]), ScriptedTalker(["Hi."]), store=store,
                 session_id="down-1")
    with pytest.raises(StoreUnavailable, match=rf"Redis at redis://127\.0\.0\.1:{port}/0 did not answer"):
        await rt.start()
    assert rt.log.version == 0  # nothing was said or logged
    await store.aclose()


async def test_a_store_that_never_returns_is_given_up_loudly_after_the_call_ended(
        redis_server: RedisServer, booking: LoopbackServer, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from superdialog_core.turn import runtime as runtime_module

    monkeypatch.setattr(runtime_module, "STORE_RETRY_FIRST", 0.01)
    monkeypatch.setattr(runtime_module, "STORE_ATTEMPTS_AFTER_END", 2)
    store = RedisStore(redis_server.url, timeout=0.5)
    late: list[str] = []
    rt = Runtime(playbook(after=1), ScriptedDirector(VERDICTS), ScriptedTalker(["Hi Ada."]),
                 store=store, session_id="gone-1", on_late_line=late.append)
    try:
        await rt.start()
        await rt.wait_idle()
        stored = rt.log.version
        redis_server.stop()  # and it never comes back
        with caplog.at_level(logging.WARNING, logger="superdialog_core.runtime"):
            await rt.user_turn("This is Ada Lovelace")
            await asyncio.wait_for(rt.wait_idle(), 10)  # the writer gives up: idle returns
        assert rt.ended and late == [LINE]
        gave_up = [r.getMessage() for r in caplog.records if "giving up" in r.getMessage()]
        assert len(gave_up) == 1
        assert f"the stored log ends at version {stored}, the call's log at {rt.log.version}" in gave_up[0]
    finally:
        await store.aclose()
