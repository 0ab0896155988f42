"""SQLiteStore: every call's log in one SQLite file (SPEC §11)."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest
from superdialog_core import (
    EventLog,
    LogStore,
    Playbook,
    Runtime,
    ScriptedDirector,
    ScriptedTalker,
    SQLiteStore,
)
from superdialog_core import events as ev
from superdialog_core.log.eventlog import LogCorruptError

PLAYBOOK = """
journeys:
  main:
    checkpoints:
      - id: ask
        goal: Know the caller's name
        slots: {name: {type: str, required: true}}
"""


def stamped(*events: ev.Event) -> EventLog:
    log = EventLog()
    for event in events:
        log.append(event)
    return log


@pytest.fixture
def store(tmp_path: Path):
    s = SQLiteStore(tmp_path / "logs" / "calls.sqlite3")
    yield s
    s.close()


def test_it_is_a_log_store_and_the_file_is_owner_only(store: SQLiteStore) -> None:
    assert isinstance(store, LogStore)
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.path.parent.stat().st_mode) == 0o700


async def test_append_then_load_round_trips_per_session(store: SQLiteStore) -> None:
    a = stamped(ev.Utterance(role="user", text="hello"), ev.SlotWrite(key="name", value="Ana",
                                                                       status="accepted", by="director"))
    b = stamped(ev.Utterance(role="user", text="other call"))
    await store.append("call-a", list(a))
    await store.append("call-b", list(b))
    assert (await store.load("call-a")).to_jsonl() == a.to_jsonl()
    assert (await store.load("call-b")).to_jsonl() == b.to_jsonl()
    assert await store.load("call-c") is None


async def test_a_gap_or_an_unstamped_event_is_refused_and_nothing_is_written(store: SQLiteStore) -> None:
    log = stamped(ev.Utterance(role="user", text="one"), ev.Utterance(role="user", text="two"))
    await store.append("call", [log[0]])
    with pytest.raises(ValueError, match="version 1 where 2 was expected"):
        await store.append("call", [log[0]])  # version 1 again: out of order
    with pytest.raises(ValueError, match="not stamped"):
        await store.append("call", [ev.Utterance(role="user", text="x")])
    assert (await store.load("call")).version == 1
    await store.append("call", [log[1]])
    assert (await store.load("call")).version == 2


async def test_erase_and_retention(store: SQLiteStore) -> None:
    await store.append("old", list(stamped(ev.Utterance(role="user", text="a"))))
    await store.append("new", list(stamped(ev.Utterance(role="user", text="b"))))
    assert await store.purge_expired(30, now=time.time() + 10 * 86_400) == []
    assert await store.purge_expired(30, now=time.time() + 40 * 86_400) == ["new", "old"]
    assert await store.load("old") is None and await store.load("new") is None
    await store.append("again", list(stamped(ev.Utterance(role="user", text="c"))))
    assert await store.erase("again") is True
    assert await store.erase("again") is False


async def test_a_corrupt_row_names_the_event_and_keeps_the_prefix(store: SQLiteStore) -> None:
    await store.append("call", list(stamped(ev.Utterance(role="user", text="a"),
                                            ev.Utterance(role="user", text="b"))))
    store._db.execute("UPDATE events SET line = '{\"type\": \"nope\"}' WHERE version = 2")
    with pytest.raises(LogCorruptError) as info:
        await store.load("call")
    assert info.value.line_number == 2 and info.value.prefix.version == 1


async def test_a_bad_session_id_is_refused(store: SQLiteStore) -> None:
    with pytest.raises(ValueError, match="path separator"):
        await store.load("../etc/passwd")


async def test_a_runtime_resumes_from_the_sqlite_log(store: SQLiteStore) -> None:
    playbook = Playbook.from_yaml(PLAYBOOK)
    rt = Runtime(playbook, ScriptedDirector([{"slots": {"name": "Ana"}}]),
                 ScriptedTalker(["Hi, who is calling?", "Thanks, Ana."]), store=store,
                 session_id="call-1")
    await rt.start()
    await rt.user_turn("It's Ana")
    await rt.wait_idle()
    assert (await store.load("call-1")).to_jsonl() == rt.log.to_jsonl()

    talker = ScriptedTalker(["Welcome back."])
    again = Runtime(playbook, ScriptedDirector([]), talker, store=store, session_id="call-1")
    resumed = await again.start()
    assert resumed.text == "" and talker.requests == []  # the opening is not replayed
    assert again.state.slots["name"].value == "Ana" and again.log.version == rt.log.version
