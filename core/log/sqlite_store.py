"""``SQLiteStore``: every call's log in one SQLite file (SPEC §11).

For a worker that keeps many calls: one file instead of one per session, transactions instead
of appends, and ``erase`` / ``purge_expired`` as single statements. Each event is stored as
its JSON line (the same form as ``JsonlStore``), keyed by session and version, so a log loads
with the same decoder and the same ``LogCorruptError`` naming the bad event. Work runs in a
worker thread (``asyncio.to_thread``) behind one lock, so the event loop that streams speech
never waits on the disk; commits use ``synchronous=FULL`` in WAL mode, so a stored turn
survives a crash. The file is created owner-only: logs hold personal data.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from .eventlog import EventLog, LogCorruptError, encode_line
from .events import Event
from .stores import RepairReport, _check_batch, _cutoff, validate_session_id

_CORRUPT = ".corrupt-"  # name part of a damaged database set aside by ``repair``

__all__ = ["SQLiteStore"]


def _decode_rows(rows: list[str]) -> EventLog:
    """The rows as a log; raises ``LogCorruptError`` at the first bad one."""
    return EventLog.from_jsonl("".join(line + "\n" for line in rows))

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    line TEXT NOT NULL,
    PRIMARY KEY (session_id, version)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    touched REAL NOT NULL
) WITHOUT ROWID;
"""


class SQLiteStore:
    """A ``LogStore`` in one SQLite database file (created owner-only if missing)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_file():
            raise ValueError(f"log database {str(self.path)!r} exists and is not a file")
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not self.path.exists():
            # Create it owner-only before SQLite does (its default honours the umask).
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        self._lock = threading.Lock()
        # A damaged file must not stop the worker from starting: every load names it
        # (LogCorruptError) until ``repair`` rebuilds it.
        self._damage: str | None = None
        self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        # One connection, used by whichever worker thread holds the lock.
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            self._damage = str(exc)
        return db

    def _source(self, session_id: str) -> str:
        return f"{self.path}#{session_id}"

    def _corrupt(self, session_id: str, exc: Exception, prefix: list[str]) -> LogCorruptError:
        try:
            log = _decode_rows(prefix)
        except LogCorruptError as bad:
            log = bad.prefix
        return LogCorruptError(
            log.version + 1, f"the SQLite database is damaged ({exc}); call repair() to keep "
            "the readable prefix (the damaged file is set aside)", log,
            self._source(session_id), session_id=session_id)

    async def load(self, session_id: str) -> EventLog | None:
        validate_session_id(session_id)
        try:
            rows = await asyncio.to_thread(self._select, session_id)
        except sqlite3.DatabaseError as exc:
            readable = await asyncio.to_thread(self._salvage_rows, session_id)
            raise self._corrupt(session_id, exc, readable) from exc
        if not rows:
            return None
        text = "".join(line + "\n" for line in rows)
        try:
            return EventLog.from_jsonl(text, source=self._source(session_id))
        except LogCorruptError as exc:
            exc.session_id = session_id
            raise

    async def repair(self, session_id: str) -> RepairReport | None:
        """Keep the valid prefix of a session's log; None for an unknown session.

        A bad row (undecodable, checksum mismatch) is deleted with every later row of the
        session. A damaged database file (SQLite itself cannot read it) is rebuilt: every
        readable prefix of every session is copied into a new file, which replaces the old
        one atomically; the old file is kept as ``<file>.corrupt-<unix ms>``.
        """
        validate_session_id(session_id)
        return await asyncio.to_thread(self._repair, session_id)

    async def append(self, session_id: str, events: Sequence[Event]) -> None:
        validate_session_id(session_id)
        if events:
            await asyncio.to_thread(self._insert, session_id, list(events))

    async def erase(self, session_id: str) -> bool:
        validate_session_id(session_id)
        return await asyncio.to_thread(self._delete, [session_id]) > 0

    async def purge_expired(
        self, retention_days: int, now: float | datetime | None = None
    ) -> list[str]:
        cutoff = _cutoff(retention_days, now)
        return await asyncio.to_thread(self._purge, cutoff)

    async def purge_older_than(self, days: int) -> list[str]:
        """Alias of ``purge_expired(days)`` (the name docs/internals.md uses)."""
        return await self.purge_expired(days)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- worker-thread parts ------------------------------------------------------------

    def _select(self, session_id: str) -> list[str]:
        with self._lock:
            if self._damage is not None:
                raise sqlite3.DatabaseError(self._damage)
            cursor = self._db.execute(
                "SELECT line FROM events WHERE session_id = ? ORDER BY version", (session_id,)
            )
            return [row[0] for row in cursor]

    def _insert(self, session_id: str, events: list[Event]) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                last = self._db.execute(
                    "SELECT MAX(version) FROM events WHERE session_id = ?", (session_id,)
                ).fetchone()[0]
                _check_batch(session_id, events, last if last is not None else 0)
                self._db.executemany(
                    "INSERT INTO events (session_id, version, line) VALUES (?, ?, ?)",
                    [(session_id, e.version, encode_line(e).decode("utf-8")) for e in events],
                )
                self._db.execute(
                    "INSERT INTO sessions (session_id, touched) VALUES (?, ?) "
                    "ON CONFLICT (session_id) DO UPDATE SET touched = excluded.touched",
                    (session_id, time.time()),
                )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _salvage_rows(self, session_id: str, db: sqlite3.Connection | None = None) -> list[str]:
        """The session's rows read one by one from version 1 until one cannot be read."""
        rows: list[str] = []
        with self._lock:
            db = db or self._db
            while True:
                try:
                    row = db.execute(
                        "SELECT line FROM events WHERE session_id = ? AND version = ?",
                        (session_id, len(rows) + 1)).fetchone()
                except sqlite3.DatabaseError:
                    return rows
                if row is None or not isinstance(row[0], str):
                    return rows
                rows.append(row[0])

    def _repair(self, session_id: str) -> RepairReport | None:
        try:
            rows = self._select(session_id)
        except sqlite3.DatabaseError as exc:
            return self._rebuild(session_id, str(exc))
        if not rows:
            return None
        try:
            log = EventLog.from_jsonl("".join(r + "\n" for r in rows), source=self._source(session_id))
        except LogCorruptError as exc:
            bad = exc.line_number
            cut = rows[bad - 1:]
            try:
                with self._lock:
                    self._db.execute("BEGIN IMMEDIATE")
                    try:
                        self._db.execute(
                            "DELETE FROM events WHERE session_id = ? AND version >= ?",
                            (session_id, bad))
                    except BaseException:
                        self._db.execute("ROLLBACK")
                        raise
                    self._db.execute("COMMIT")
            except sqlite3.DatabaseError as db_exc:
                return self._rebuild(session_id, str(db_exc))
            return RepairReport(session_id, exc.prefix, cut_records=len(cut),
                                cut_bytes=sum(len(r.encode("utf-8", "replace")) + 1 for r in cut),
                                line=bad, reason=exc.reason)
        return RepairReport(session_id, log)

    def _rebuild(self, session_id: str, damage: str) -> RepairReport:
        """Copy every session's readable prefix into a new file; set the damaged one aside."""
        with self._lock:
            touched: dict[str, float] = {}
            # When the index of sessions is damaged too, only the one asked for is kept.
            with contextlib.suppress(sqlite3.DatabaseError):
                touched = dict(self._db.execute("SELECT session_id, touched FROM sessions").fetchall())
            sessions = list(touched)
        if session_id not in sessions:
            sessions.append(session_id)
        fresh = self.path.with_name(f".{self.path.name}.rebuild")
        for leftover in (fresh, Path(f"{fresh}-wal"), Path(f"{fresh}-shm")):
            leftover.unlink(missing_ok=True)
        os.close(os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        target = sqlite3.connect(fresh, isolation_level=None)
        kept_log = EventLog()
        try:
            target.executescript(_SCHEMA)
            target.execute("BEGIN")
            for sid in sessions:
                rows = self._salvage_rows(sid)
                try:
                    log = _decode_rows(rows)
                except LogCorruptError as exc:
                    log = exc.prefix
                kept = rows[: log.version]
                target.executemany(
                    "INSERT INTO events (session_id, version, line) VALUES (?, ?, ?)",
                    [(sid, i + 1, line) for i, line in enumerate(kept)])
                if kept:
                    target.execute("INSERT INTO sessions (session_id, touched) VALUES (?, ?)",
                                   (sid, touched.get(sid, time.time())))
                if sid == session_id:
                    kept_log = log
            target.execute("COMMIT")
        finally:
            target.close()
        aside = self.path.with_name(f"{self.path.name}{_CORRUPT}{int(time.time() * 1000)}")
        with self._lock:
            self._db.close()
            os.replace(self.path, aside)
            for suffix in ("-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
            os.replace(fresh, self.path)
            self._damage = None
            self._db = self._open()
        # How much of this session was lost is unknown (the damaged pages cannot be read):
        # at least the unreadable record, counted as one.
        return RepairReport(session_id, kept_log, cut_records=1, cut_bytes=0,
                            line=kept_log.version + 1,
                            reason=f"the SQLite database is damaged ({damage})",
                            set_aside=str(aside))

    def _delete(self, session_ids: list[str]) -> int:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                deleted = 0
                for session_id in session_ids:
                    deleted += self._db.execute(
                        "DELETE FROM events WHERE session_id = ?", (session_id,)
                    ).rowcount
                    self._db.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            return deleted

    def _purge(self, cutoff: float) -> list[str]:
        # Damaged files set aside by ``repair`` hold the same personal data: same retention.
        for aside in self.path.parent.glob(f"{self.path.name}{_CORRUPT}*"):
            if aside.is_file() and aside.stat().st_mtime < cutoff:
                aside.unlink()
        with self._lock:
            expired = [row[0] for row in self._db.execute(
                "SELECT session_id FROM sessions WHERE touched < ? ORDER BY session_id", (cutoff,)
            )]
        if expired:
            self._delete(expired)
        return expired
