"""Where logs live between turns and across workers (SPEC §11, §16).

A store persists a conversation's events so a call can be resumed (worker failover) and
audited. Logs hold personal data, so ``JsonlStore`` files are owner-only, ``erase`` deletes a
session, and ``purge_expired`` enforces ``policies.log_retention_days``. File work (write,
fsync, read, unlink) runs in a worker thread so the event loop that streams speech never
waits on a disk.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol, runtime_checkable

from .eventlog import EventLog, LogCorruptError, encode_line
from .events import Event

_SECONDS_PER_DAY = 86_400.0
_CORRUPT = ".corrupt-"  # name part of a corrupt log set aside by ``JsonlStore.repair``
_REMEMBERED_SESSIONS = 4096  # bound on the per-session "last stored version" memo
_SESSION_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._:@+=-]{0,199}")


@dataclass(frozen=True, slots=True)
class RepairReport:
    """What ``LogStore.repair`` did to one session's stored log.

    ``log`` is the log as stored afterwards (the valid prefix; the whole log when it was
    healthy). ``cut_records`` / ``cut_bytes`` say what was removed (bytes counted as the JSONL
    lines would be: UTF-8 plus one newline each), ``line`` and ``reason`` name the first bad
    record, ``set_aside`` where the removed data was kept for inspection (None: nowhere).
    """

    session_id: str
    log: EventLog
    cut_records: int = 0
    cut_bytes: int = 0
    line: int | None = None
    reason: str | None = None
    set_aside: str | None = None

    @property
    def repaired(self) -> bool:
        """True when something was cut."""
        return self.cut_records > 0 or self.cut_bytes > 0


@runtime_checkable
class LogStore(Protocol):
    """The persistence contract the runtime and the plugin use."""

    async def load(self, session_id: str) -> EventLog | None:
        """The stored log, or None for an unknown session."""
        ...

    async def append(self, session_id: str, events: Sequence[Event]) -> None:
        """Persist stamped events that follow what is stored (durably, when the store can)."""
        ...

    async def erase(self, session_id: str) -> bool:
        """Delete a session's log (a data-subject request); True when there was one."""
        ...

    async def purge_expired(
        self, retention_days: int, now: float | datetime | None = None
    ) -> list[str]:
        """Delete logs untouched for more than ``retention_days``; returns their session ids."""
        ...

    async def repair(self, session_id: str) -> RepairReport | None:
        """Keep the valid prefix of a damaged log, cut the rest; None for an unknown session.

        A healthy log is left as it is (a report with nothing cut). Afterwards ``load``
        returns ``report.log`` and ``append`` continues after it. Appends no event: the
        runtime logs ``log_repaired`` when it resumes from a repaired log.
        """
        ...


def validate_session_id(session_id: str) -> str:
    """Return ``session_id`` if it can name a log file, else raise ``ValueError`` saying why."""
    if not isinstance(session_id, str):
        raise TypeError(f"session id must be a string, not {type(session_id).__name__}")
    if _SESSION_ID.fullmatch(session_id) is None:
        if not session_id:
            why = "it is empty"
        elif len(session_id) > 200:
            why = "it is longer than 200 characters"
        elif "/" in session_id or "\\" in session_id:
            why = "it contains a path separator"
        elif session_id.startswith((".", "-")):
            why = "it starts with '.' or '-'"
        else:
            why = "it contains characters other than letters, digits and . _ : @ + = -"
        raise ValueError(
            f"session id {session_id!r} cannot name a log: {why}; use letters, digits and "
            "'-', '_', '.', ':' (LiveKit room and job ids fit)"
        )
    return session_id


def _check_batch(session_id: str, events: Sequence[Event], last: int | None) -> None:
    """Refuse unstamped or out-of-order events before anything is written."""
    for offset, event in enumerate(events):
        if event.version <= 0:
            raise ValueError(
                f"cannot store {type(event).__name__} for {session_id!r}: it is not stamped; "
                "append it to the EventLog first, then store the log's new events"
            )
        expected = (events[0].version if last is None else last + 1) + offset
        if event.version != expected:
            raise ValueError(
                f"cannot store {session_id!r}: event version {event.version} where "
                f"{expected} was expected (store log.since(<stored version>) in order)"
            )


def _cutoff(retention_days: int, now: float | datetime | None) -> float:
    if isinstance(retention_days, bool) or not isinstance(retention_days, int) or retention_days < 1:
        raise ValueError(
            f"retention_days must be a whole number of days >= 1, not {retention_days!r}"
        )
    if now is None:
        now_ts = time.time()
    elif isinstance(now, datetime):
        if now.tzinfo is None:
            raise ValueError("now must be a timezone-aware datetime (or a Unix timestamp)")
        now_ts = now.timestamp()
    else:
        now_ts = float(now)
    return now_ts - retention_days * _SECONDS_PER_DAY


class StoreConflict(Exception):
    """Another writer appended to this call's log first; nothing of the batch was stored.

    Two workers that both run one call (a job re-dispatched while the first worker still
    lives) can never both append: the store takes the first batch for a version and refuses
    the second, so the stored log stays one contiguous history. The refused worker must stop
    writing (its copy of the call has diverged); ``expected`` is the version it appended
    after, ``stored`` the version the store already holds.
    """

    def __init__(self, session_id: str, *, expected: int, stored: int, store: str = "") -> None:
        where = f" in {store}" if store else ""
        super().__init__(
            f"session {session_id!r}: another writer appended to this call's log{where} "
            f"(it holds version {stored}, this writer appended after {expected}); this worker "
            "no longer owns the call and must stop writing it"
        )
        self.session_id = session_id
        self.expected = expected
        self.stored = stored


class StoreUnavailable(ConnectionError):
    """The store did not answer (its message names where it was looked for and the fix)."""


class MemoryStore:
    """Logs kept in this process (tests, single-process development)."""

    def __init__(self) -> None:
        self._events: dict[str, list[Event]] = {}
        self._touched: dict[str, float] = {}

    async def load(self, session_id: str) -> EventLog | None:
        events = self._events.get(validate_session_id(session_id))
        return None if events is None else EventLog(events)

    async def append(self, session_id: str, events: Sequence[Event]) -> None:
        stored = self._events.get(validate_session_id(session_id))
        _check_batch(session_id, events, len(stored) if stored is not None else 0)
        self._events.setdefault(session_id, []).extend(events)
        self._touched[session_id] = time.time()

    async def erase(self, session_id: str) -> bool:
        self._touched.pop(validate_session_id(session_id), None)
        return self._events.pop(session_id, None) is not None

    async def purge_expired(
        self, retention_days: int, now: float | datetime | None = None
    ) -> list[str]:
        cutoff = _cutoff(retention_days, now)
        expired = [sid for sid, touched in self._touched.items() if touched < cutoff]
        for sid in expired:
            del self._events[sid]
            del self._touched[sid]
        return expired

    async def purge_older_than(self, days: int) -> list[str]:
        """Alias of ``purge_expired(days)`` (the name docs/internals.md uses)."""
        return await self.purge_expired(days)

    async def repair(self, session_id: str) -> RepairReport | None:
        """Memory holds decoded events, which cannot be damaged: a report with nothing cut."""
        events = self._events.get(validate_session_id(session_id))
        return None if events is None else RepairReport(session_id, EventLog(events))

    def session_ids(self) -> list[str]:
        return list(self._events)


class JsonlStore:
    """One owner-only JSONL file per session under ``directory`` (``<session_id>.jsonl``).

    Each ``append`` writes the batch with one ``write`` call and fsyncs it in a worker
    thread; appends for one session are serialised so lines never interleave. The directory
    is created owner-only (0o700) when it does not exist.
    """

    suffix = ".jsonl"

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise ValueError(f"log directory {str(self.directory)!r} exists and is not a directory")
        # A lock lives while an operation holds it, so idle sessions cost nothing.
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        # Last stored version of recently used sessions (a bounded memo, oldest dropped first),
        # so an append that would leave a gap is refused before it reaches the file.
        self._last: dict[str, int] = {}

    def path(self, session_id: str) -> Path:
        """The file that holds ``session_id``'s log."""
        return self.directory / f"{validate_session_id(session_id)}{self.suffix}"

    async def load(self, session_id: str) -> EventLog | None:
        path = self.path(session_id)
        async with self._lock(session_id):
            text = await asyncio.to_thread(_read_bytes, path)
            if text is None:
                return None
            try:
                log = EventLog.from_jsonl(text, source=str(path))
            except LogCorruptError as exc:
                exc.session_id = session_id
                raise
            self._remember(session_id, log.version)
            return log

    async def append(self, session_id: str, events: Sequence[Event]) -> None:
        path = self.path(session_id)
        if not events:
            return
        async with self._lock(session_id):
            _check_batch(session_id, events, self._last.get(session_id))
            data = b"".join(encode_line(event) + b"\n" for event in events)
            await asyncio.to_thread(self._write, path, data)
            self._remember(session_id, events[-1].version)

    async def erase(self, session_id: str) -> bool:
        """Delete the session's log and any copies ``repair`` set aside."""
        path = self.path(session_id)
        async with self._lock(session_id):
            self._last.pop(session_id, None)
            return await asyncio.to_thread(self._erase, path)

    async def repair(self, session_id: str) -> RepairReport | None:
        """Make a corrupt log resumable: keep its valid prefix, set the bad file aside.

        Returns what was done (None for an unknown session). When a line is corrupt, the file
        is kept as ``<id>.jsonl.corrupt-<unix ms>`` (owner-only; erase and retention cover it)
        and replaced atomically by the valid prefix (its lines as they were written), so
        appends after a resume continue a readable file. A healthy log is left unchanged.
        """
        path = self.path(session_id)
        async with self._lock(session_id):
            text = await asyncio.to_thread(_read_bytes, path)
            if text is None:
                return None
            try:
                log = EventLog.from_jsonl(text, source=str(path))
            except LogCorruptError as exc:
                log = exc.prefix
                keep = _prefix_bytes(text, exc.line_number)
                aside = await asyncio.to_thread(self._replace_keeping_copy, path, keep)
                self._remember(session_id, log.version)
                rest = text[len(keep):]
                return RepairReport(
                    session_id, log, cut_records=len([r for r in rest.split(b"\n") if r.strip()]),
                    cut_bytes=len(rest), line=exc.line_number, reason=exc.reason,
                    set_aside=str(aside))
            self._remember(session_id, log.version)
            return RepairReport(session_id, log)

    async def purge_expired(
        self, retention_days: int, now: float | datetime | None = None
    ) -> list[str]:
        cutoff = _cutoff(retention_days, now)
        expired = await asyncio.to_thread(self._purge, cutoff)
        for session_id in expired:
            self._last.pop(session_id, None)
        return expired

    async def purge_older_than(self, days: int) -> list[str]:
        """Alias of ``purge_expired(days)`` (the name docs/internals.md uses)."""
        return await self.purge_expired(days)

    def _remember(self, session_id: str, version: int) -> None:
        self._last.pop(session_id, None)
        self._last[session_id] = version
        if len(self._last) > _REMEMBERED_SESSIONS:
            del self._last[next(iter(self._last))]

    # --- worker-thread parts ------------------------------------------------------------

    def _lock(self, session_id: str) -> asyncio.Lock:
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = asyncio.Lock()
        return lock

    def _write(self, path: Path, data: bytes) -> None:
        if not self.directory.exists():
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(path, flags, 0o600)
        try:
            # A file made by someone else (or an older version) is narrowed to owner-only.
            info = os.fstat(fd)
            if info.st_mode & 0o077:
                os.fchmod(fd, 0o600)
            # A crash can stop a write just before its newline: the last line is whole, so it
            # loads, but our line must not be glued to it (a blank line is skipped on read).
            if info.st_size and os.pread(fd, 1, info.st_size - 1) != b"\n":
                data = b"\n" + data
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        if info.st_size == 0:
            _fsync_directory(self.directory)  # a new file's name must survive a crash too

    def _purge(self, cutoff: float) -> list[str]:
        expired: set[str] = set()
        if not self.directory.is_dir():
            return []
        marker = self.suffix + _CORRUPT
        for entry in os.scandir(self.directory):
            name = entry.name
            if name.endswith(self.suffix):
                session_id = name[: -len(self.suffix)]
            elif marker in name:
                session_id = name[: name.index(marker)]
            else:
                continue
            if not entry.is_file(follow_symlinks=False):
                continue
            if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                os.unlink(entry.path)
                expired.add(session_id)
        return sorted(expired)

    def _erase(self, path: Path) -> bool:
        erased = _unlink(path)
        if self.directory.is_dir():
            marker = path.name + _CORRUPT
            for entry in os.scandir(self.directory):
                if entry.name.startswith(marker):
                    os.unlink(entry.path)
                    erased = True
        return erased

    def _replace_keeping_copy(self, path: Path, data: bytes) -> Path:
        aside = path.with_name(f"{path.name}{_CORRUPT}{int(time.time() * 1000)}")
        os.link(path, aside)  # the corrupt file stays, under another name, for inspection
        temporary = path.with_name(f".{path.name}.repair")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(temporary, flags, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
        _fsync_directory(self.directory)
        return aside


def _prefix_bytes(text: bytes, line_number: int) -> bytes:
    """The bytes of ``text`` before its 1-based line ``line_number`` (whole lines, as written)."""
    end = 0
    for _ in range(line_number - 1):
        end = text.index(b"\n", end) + 1
    return text[:end]


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


__all__ = [
    "JsonlStore", "LogStore", "MemoryStore", "RepairReport", "StoreConflict", "StoreUnavailable",
    "validate_session_id",
]
