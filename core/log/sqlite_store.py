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
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from .eventlog import EventLog
from .events import Event, encode
from .stores import _check_batch, _cutoff, validate_session_id

__all__ = ["SQLiteStore"]

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
        # One connection, used by whichever worker thread holds the lock.
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    async def load(self, session_id: str) -> EventLog | None:
        validate_session_id(session_id)
        rows = await asyncio.to_thread(self._select, session_id)
        if not rows:
            return None
        text = "".join(line + "\n" for line in rows)
        return EventLog.from_jsonl(text, source=f"{self.path}#{session_id}")

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
                    [(session_id, e.version, encode(e).decode("utf-8")) for e in events],
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
        with self._lock:
            expired = [row[0] for row in self._db.execute(
                "SELECT session_id FROM sessions WHERE touched < ? ORDER BY session_id", (cutoff,)
            )]
        if expired:
            self._delete(expired)
        return expired
