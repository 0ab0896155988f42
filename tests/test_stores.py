"""Log stores: round trip, owner-only files, erase, retention, corrupt files (SPEC §11, §13, §16)."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from superdialog_core import events as ev
from superdialog_core.log import stores as stores_module
from superdialog_core.log.eventlog import EventLog, LogCorruptError, unseal
from superdialog_core.log.events import encode
from superdialog_core.log.stores import JsonlStore, LogStore, MemoryStore, validate_session_id

DAY = 86_400.0


def _log(n_extra: int = 3) -> EventLog:
    log = EventLog(clock=lambda: 1_700_000_000.0)
    log.append(ev.SessionStart(session_id="call-1", playbook_hash="h",
                               anchor="2026-11-30T09:00:00+00:00"))
    log.append(ev.Advance(to="booking.collect", rule_id="init", by="init"))
    for i in range(n_extra):
        log.append(ev.Utterance(role="user", text=f"turn {i} — café"))
    return log


@pytest.fixture(params=["memory", "jsonl"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> LogStore:
    if request.param == "memory":
        return MemoryStore()
    return JsonlStore(tmp_path / "logs")


def test_both_stores_implement_the_protocol(tmp_path: Path) -> None:
    assert isinstance(MemoryStore(), LogStore)
    assert isinstance(JsonlStore(tmp_path), LogStore)


async def test_round_trip_in_batches(store: LogStore) -> None:
    log = _log()
    assert await store.load("call-1") is None
    await store.append("call-1", log[:2])
    await store.append("call-1", log.since(2))
    loaded = await store.load("call-1")
    assert loaded is not None and list(loaded) == list(log)
    await store.append("call-1", [])  # nothing new: nothing happens


async def test_refuses_unstamped_and_gapped_batches(store: LogStore) -> None:
    log = _log()
    await store.append("call-1", log[:2])
    with pytest.raises(ValueError, match="version 4 where 3 was expected"):
        await store.append("call-1", log[3:])
    with pytest.raises(ValueError, match="not stamped"):
        await store.append("call-1", [ev.Utterance(role="user", text="x")])
    loaded = await store.load("call-1")
    assert loaded is not None and len(loaded) == 2  # nothing half-written


@pytest.mark.parametrize("bad", ["", "../etc/passwd", "a/b", "a\\b", ".hidden", "x" * 201, "a b"])
async def test_session_ids_that_cannot_name_a_file_are_refused(store: LogStore, bad: str) -> None:
    with pytest.raises(ValueError, match="cannot name a log"):
        await store.load(bad)
    with pytest.raises(ValueError, match="cannot name a log"):
        await store.append(bad, _log()[:1])


def test_session_id_messages_say_why() -> None:
    with pytest.raises(ValueError, match="path separator"):
        validate_session_id("../x")
    with pytest.raises(ValueError, match="empty"):
        validate_session_id("")
    assert validate_session_id("RM_abc:job-12.3") == "RM_abc:job-12.3"


async def test_erase_deletes_the_session(store: LogStore) -> None:
    await store.append("call-1", list(_log()))
    await store.append("call-2", list(_log()))
    assert await store.erase("call-1") is True
    assert await store.load("call-1") is None
    assert await store.erase("call-1") is False
    assert await store.load("call-2") is not None


async def test_memory_store_retention() -> None:
    store = MemoryStore()
    await store.append("old", list(_log()))
    await store.append("new", list(_log()))
    store._touched["old"] -= 10 * DAY  # as if last written ten days ago
    assert await store.purge_expired(7) == ["old"]
    assert await store.load("old") is None and await store.load("new") is not None
    assert await store.purge_older_than(7) == []
    with pytest.raises(ValueError, match="retention_days"):
        await store.purge_expired(0)


# --- JsonlStore ------------------------------------------------------------------------


async def test_jsonl_files_are_owner_only(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path / "logs")
    await store.append("call-1", list(_log()))
    path = store.path("call-1")
    assert path == tmp_path / "logs" / "call-1.jsonl"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    # A file left world-readable by something else is narrowed on the next append.
    other = store.path("call-2")
    other.write_text("")
    other.chmod(0o644)
    await store.append("call-2", list(_log()))
    assert stat.S_IMODE(other.stat().st_mode) == 0o600


async def test_jsonl_file_is_the_log_s_jsonl_form_with_a_checksum_per_line(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    log = _log()
    await store.append("call-1", log[:1])
    await store.append("call-1", log.since(1))
    lines = store.path("call-1").read_bytes().split(b"\n")
    assert lines[-1] == b""
    assert [unseal(line) for line in lines[:-1]] == [encode(e) for e in log]
    assert all(line.endswith(b'"}') and b',"crc32":"' in line for line in lines[:-1])
    assert [json.loads(line)["type"] for line in lines[:-1]] == [e.__struct_config__.tag for e in log]


async def test_jsonl_write_and_fsync_run_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[int] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        threads.append(threading.get_ident())
        real_fsync(fd)

    monkeypatch.setattr(stores_module.os, "fsync", recording_fsync)
    await JsonlStore(tmp_path).append("call-1", list(_log()))
    assert threads, "append must fsync"
    assert threading.get_ident() not in threads


async def test_jsonl_corrupt_line_names_file_and_line_and_keeps_prefix(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    await store.append("call-1", list(_log()))
    path = store.path("call-1")
    with path.open("ab") as handle:
        handle.write(b'{"type":"utterance","version":6,"role":"us')  # a crash mid-write
    with pytest.raises(LogCorruptError) as info:
        await store.load("call-1")
    assert info.value.line_number == 6
    assert str(path) in str(info.value) and "line 6" in str(info.value)
    assert [e.version for e in info.value.prefix] == [1, 2, 3, 4, 5]


async def test_jsonl_append_after_load_continues_the_versions(tmp_path: Path) -> None:
    log = _log()
    await JsonlStore(tmp_path).append("call-1", list(log))
    store = JsonlStore(tmp_path)  # another worker resuming the call
    resumed = await store.load("call-1")
    assert resumed is not None
    extra = resumed.append(ev.Utterance(role="user", text="resumed"))
    with pytest.raises(ValueError, match="where 6 was expected"):
        await store.append("call-1", [log[0]])
    await store.append("call-1", [extra])
    again = await JsonlStore(tmp_path).load("call-1")
    assert again is not None and again.version == 6


async def test_jsonl_retention_deletes_files_older_than_n_days(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    for sid in ("old", "fresh"):
        await store.append(sid, list(_log()))
    now = time.time()
    os.utime(store.path("old"), (now - 31 * DAY, now - 31 * DAY))
    (tmp_path / "notes.txt").write_text("not a log")
    os.utime(tmp_path / "notes.txt", (now - 99 * DAY, now - 99 * DAY))
    assert await store.purge_expired(30, now=datetime.fromtimestamp(now, timezone.utc)) == ["old"]
    assert not store.path("old").exists() and store.path("fresh").exists()
    assert (tmp_path / "notes.txt").exists()
    assert await store.purge_expired(30, now=now + 31 * DAY) == ["fresh"]
    with pytest.raises(ValueError, match="timezone-aware"):
        await store.purge_expired(30, now=datetime(2026, 1, 1))


async def test_jsonl_purge_of_a_missing_directory_is_empty(tmp_path: Path) -> None:
    assert await JsonlStore(tmp_path / "nope").purge_expired(1) == []


def test_jsonl_store_refuses_a_file_as_directory(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("")
    with pytest.raises(ValueError, match="not a directory"):
        JsonlStore(target)


async def test_jsonl_repair_keeps_the_prefix_and_sets_the_bad_file_aside(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    log = _log()
    await store.append("call-1", list(log))
    path = store.path("call-1")
    with path.open("ab") as handle:
        handle.write(b'{"type":"utter')  # a crash mid-write
    before = path.read_bytes()
    report = await store.repair("call-1")
    assert report is not None and list(report.log) == list(log)
    assert report.cut_bytes == len(b'{"type":"utter') and report.cut_records == 1
    assert report.line == 6 and report.repaired
    assert path.read_bytes() == before[: -len(b'{"type":"utter')]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    copies = [p for p in tmp_path.iterdir() if p.name.startswith("call-1.jsonl.corrupt-")]
    assert len(copies) == 1 and copies[0].read_bytes().endswith(b'{"type":"utter')
    assert report.set_aside == str(copies[0])
    # The resumed call appends to a readable file.
    await store.append("call-1", [report.log.append(ev.Utterance(role="user", text="again"))])
    reloaded = await store.load("call-1")
    assert reloaded is not None and reloaded.version == 6
    healthy = await store.repair("call-1")  # healthy: unchanged
    assert healthy is not None and not healthy.repaired and healthy.log.version == 6
    assert len([p for p in tmp_path.iterdir() if ".corrupt-" in p.name]) == 1
    assert await store.repair("unknown") is None
    # Erase and retention cover the copy set aside (it holds the same personal data).
    assert await store.erase("call-1") is True
    assert list(tmp_path.iterdir()) == []


async def test_jsonl_retention_covers_copies_set_aside(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    await store.append("call-1", list(_log()))
    with store.path("call-1").open("ab") as handle:
        handle.write(b"garbage\n")
    await store.repair("call-1")
    assert await store.purge_expired(1, now=time.time() + 2 * DAY) == ["call-1"]
    assert list(tmp_path.iterdir()) == []
