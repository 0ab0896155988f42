"""``RedisStore``: call logs in one Redis that every worker reaches (SPEC §11, scale-out).

A job re-dispatched to a worker on another machine finds its call's log here and resumes it.
Each session is one Redis LIST (``<prefix>:{<session id>}:log``) whose element *i* is the JSON
line of version *i + 1* (the same line form as ``JsonlStore``, so one decoder, one
``LogCorruptError``). Appends go through one Lua script, a compare-and-append: it stores a
batch only when the list ends exactly before the batch's first version, so two workers that
both believe they own a call can never both append: the second gets ``StoreConflict`` and the
stored log stays one contiguous history. A retried append whose reply was lost (the
connection dropped after Redis ran the script) finds its own lines already there and is
acknowledged again, not doubled and not reported as a conflict; a retry that grew meanwhile
(the runtime resends everything not acknowledged) appends only the events after them.

Durability: an append is *acknowledged* when the script has returned; only acknowledged
appends count as stored. They survive the worker (any crash, SIGKILL included) at once. They
survive a crash of Redis itself only as far as its persistence goes: run Redis with
``appendonly yes`` and ``appendfsync always`` (each write fsynced to the AOF before the
reply) for "acknowledged = on disk"; with ``appendfsync everysec`` (Redis' default when AOF
is on) up to about one second of acknowledged appends can be lost on a power failure, and
without AOF everything since the last snapshot. The store reads the server's setting on first
use and warns once when it is weaker than ``always``.

Retention: with ``retention_days`` every append (re)sets the list's TTL, so a log untouched
for that long expires in Redis itself; ``purge_expired(days)`` also deletes logs by the
last-append time kept in a sorted set (``<prefix>:sessions``), for an explicit sweep.
One Redis (or a primary with replicas / Sentinel) is assumed, not Redis Cluster: the script
touches the log and the sessions index together.

``redis`` (redis-py's asyncio client) is imported only when a ``RedisStore`` is made; install
the ``redis`` extra (``pip install superdialog-livekit[redis]``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .eventlog import EventLog, LogCorruptError, encode_line
from .events import Event
from .stores import (
    RepairReport,
    StoreConflict,
    StoreUnavailable,
    _check_batch,
    _cutoff,
    validate_session_id,
)

__all__ = ["RedisStore"]

logger = logging.getLogger("superdialog_core.redis_store")

_SECONDS_PER_DAY = 86_400

# KEYS[1] the log list, KEYS[2] the sessions index; ARGV[1] the version before the batch,
# ARGV[2] TTL seconds (0: none), ARGV[3] now (index score), ARGV[4] the session id,
# ARGV[5..] the batch's lines. Returns {status, stored length}.
_APPEND = """
local base = tonumber(ARGV[1])
local count = #ARGV - 4
local n = redis.call('LLEN', KEYS[1])
local i = 5
if n ~= base then
  if n < base then
    return {'gap', n}
  end
  -- A retry whose earlier attempt was stored after all (its reply was lost): the stored
  -- lines must be this batch's first ones; a retry that grew meanwhile appends the rest.
  local overlap = math.min(n - base, count)
  local stored = redis.call('LRANGE', KEYS[1], base, base + overlap - 1)
  for k = 1, overlap do
    if stored[k] ~= ARGV[k + 4] then
      return {'conflict', n}
    end
  end
  if overlap == count then
    return {'again', n}
  end
  i = 5 + overlap
  n = base + overlap
  count = count - overlap
end
while i <= #ARGV do
  local j = math.min(i + 999, #ARGV)
  redis.call('RPUSH', KEYS[1], unpack(ARGV, i, j))
  i = j + 1
end
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  redis.call('EXPIRE', KEYS[1], ttl)
end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
return {'ok', n + count}
"""

# KEYS[1] the log, KEYS[2] where the corrupt copy goes; ARGV[1] the length read, ARGV[2] the
# valid prefix's length, ARGV[3] TTL seconds. Cuts only if nobody appended meanwhile.
_REPAIR = """
local n = redis.call('LLEN', KEYS[1])
if n ~= tonumber(ARGV[1]) then
  return {'conflict', n}
end
redis.call('COPY', KEYS[1], KEYS[2])
local keep = tonumber(ARGV[2])
if keep == 0 then
  redis.call('DEL', KEYS[1])
else
  redis.call('LTRIM', KEYS[1], 0, keep - 1)
end
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  redis.call('EXPIRE', KEYS[2], ttl)
end
return {'ok', keep}
"""


def redacted_url(url: str) -> str:
    """``url`` without its password (for messages and logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


class RedisStore:
    """A ``LogStore`` in Redis, shared by every worker (see the module docstring).

    ``url`` is ``redis://[[user]:password@]host[:port][/db]``, ``rediss://...`` for TLS or
    ``unix:///path/to/redis.sock``; ``retention_days`` sets each log's TTL;
    ``max_connections`` bounds the pool (more concurrent commands wait their turn, in
    order); ``timeout`` bounds connecting and each command.
    """

    def __init__(
        self,
        url: str,
        *,
        retention_days: int | None = None,
        max_connections: int = 32,
        timeout: float = 5.0,
        prefix: str = "superdialog",
    ) -> None:
        if not isinstance(url, str) or urlsplit(url).scheme not in ("redis", "rediss", "unix"):
            raise ValueError(
                f"RedisStore needs a redis://, rediss:// or unix:// URL, not {url!r} "
                "(e.g. SUPERDIALOG_STORE=redis://:password@10.0.0.5:6379/0)"
            )
        if retention_days is not None:
            _cutoff(retention_days, 0.0)  # the same check (and message) as purge_expired
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, not {max_connections!r}")
        try:
            import redis.asyncio as aioredis
            from redis import exceptions
        except ImportError as exc:
            raise ImportError(
                "RedisStore needs redis-py: pip install 'superdialog-livekit[redis]'"
            ) from exc
        self.url = redacted_url(url)
        self.retention_days = retention_days
        self._ttl = retention_days * _SECONDS_PER_DAY if retention_days else 0
        self._prefix = prefix
        self._errors = exceptions
        # At most ``max_connections`` commands run at once; the rest queue on the semaphore,
        # first come first served (redis-py's BlockingConnectionPool wakes every waiter on
        # each release, which starves some of 500 concurrent calls past their timeout).
        pool = aioredis.ConnectionPool.from_url(
            url, max_connections=max_connections,
            socket_timeout=timeout, socket_connect_timeout=timeout,
        )
        self._slots = asyncio.Semaphore(max_connections)
        self._redis = aioredis.Redis(connection_pool=pool)
        self._append_script = self._redis.register_script(_APPEND)
        self._repair_script = self._redis.register_script(_REPAIR)
        self._checked: asyncio.Future[None] | None = None  # the durability check, run once

    # --- keys ---------------------------------------------------------------------------

    def key(self, session_id: str) -> str:
        """The Redis key of ``session_id``'s log (hash-tagged by the session id)."""
        return f"{self._prefix}:{{{validate_session_id(session_id)}}}:log"

    @property
    def _index(self) -> str:
        return f"{self._prefix}:sessions"

    # --- the LogStore protocol ----------------------------------------------------------

    async def load(self, session_id: str) -> EventLog | None:
        lines = await self._lines(session_id)
        if lines is None:
            return None
        return EventLog.from_jsonl(_text(lines), source=self._source(session_id))

    async def append(self, session_id: str, events: Sequence[Event]) -> None:
        """Store stamped events that follow what is stored; ``StoreConflict`` when another
        writer appended first (nothing of this batch is then stored)."""
        key = self.key(session_id)
        if not events:
            return
        _check_batch(session_id, events, None)
        base = events[0].version - 1
        lines = [encode_line(event) for event in events]  # sealed with a checksum, as JSONL lines
        status, stored = await self._call(
            self._append_script, keys=[key, self._index],
            args=[base, self._ttl, time.time(), session_id, *lines],
        )
        status = _str(status)
        if status in ("ok", "again"):
            return
        if status == "gap":
            raise ValueError(
                f"cannot store {session_id!r}: event version {base + 1} where {stored + 1} was "
                "expected (store log.since(<stored version>) in order)"
            )
        raise StoreConflict(session_id, expected=base, stored=int(stored), store=self.url)

    async def erase(self, session_id: str) -> bool:
        """Delete the session's log, copies ``repair`` set aside, and its index entry."""
        key = self.key(session_id)
        aside = [k async for k in self._scan(f"{key}:corrupt:*")]
        deleted = await self._call(self._redis.delete, key, *aside)
        await self._call(self._redis.zrem, self._index, session_id)
        return deleted > 0

    async def repair(self, session_id: str) -> RepairReport | None:
        """Keep the valid prefix of a damaged log, cut the rest; None for an unknown session.

        The cut happens in one script, only if nobody appended since the log was read
        (``StoreConflict`` otherwise), after the whole list was copied to
        ``<key>:corrupt:<unix ms>`` (named in ``set_aside``; erase and the TTL cover it). A
        healthy log is left as it is. Appends no event (the runtime logs ``log_repaired``).
        """
        key = self.key(session_id)
        lines = await self._lines(session_id)
        if lines is None:
            return None
        try:
            log = EventLog.from_jsonl(_text(lines), source=self._source(session_id))
        except LogCorruptError as exc:
            bad = exc
        else:
            return RepairReport(session_id, log)
        log = bad.prefix
        aside = f"{key}:corrupt:{int(time.time() * 1000)}"
        status, stored = await self._call(
            self._repair_script, keys=[key, aside], args=[len(lines), log.version, self._ttl],
        )
        if _str(status) != "ok":
            raise StoreConflict(session_id, expected=len(lines), stored=int(stored), store=self.url)
        cut = lines[log.version:]
        logger.warning("session %s: log cut to its valid prefix (version %d; %d records from "
                       "record %d on: %s); the whole list is kept as %s", session_id,
                       log.version, len(cut), bad.line, bad.reason, aside)
        return RepairReport(session_id, log, cut_records=len(cut),
                            cut_bytes=sum(len(line) + 1 for line in cut), line=bad.line,
                            reason=bad.reason, set_aside=aside)

    async def purge_expired(
        self, retention_days: int, now: float | datetime | None = None
    ) -> list[str]:
        cutoff = _cutoff(retention_days, now)
        members = await self._call(self._redis.zrangebyscore, self._index, "-inf", f"({cutoff}")
        expired = sorted(m.decode() if isinstance(m, bytes) else m for m in members)
        for session_id in expired:
            await self.erase(session_id)
        return expired

    async def purge_older_than(self, days: int) -> list[str]:
        """Alias of ``purge_expired(days)`` (the name docs/internals.md uses)."""
        return await self.purge_expired(days)

    async def ping(self) -> None:
        """Check that Redis answers (``StoreUnavailable`` naming the URL when it does not)."""
        await self._call(self._redis.ping)

    async def aclose(self) -> None:
        """Close the pool's connections."""
        await self._redis.aclose()

    # --- helpers ------------------------------------------------------------------------

    def _source(self, session_id: str) -> str:
        return f"{self.url}#{self.key(session_id)}"

    async def _lines(self, session_id: str) -> list[bytes] | None:
        """The stored lines of a log (None: unknown); a key of another type is corrupt."""
        key = self.key(session_id)
        try:
            lines = await self._call(self._redis.lrange, key, 0, -1)
        except self._errors.ResponseError as exc:  # WRONGTYPE: someone wrote another type
            kind = _str(await self._call(self._redis.type, key))
            raise LogCorruptError(1, f"the key holds a Redis {kind}, not a list of events "
                                  f"({exc})", EventLog(), self._source(session_id)) from exc
        return lines or None

    async def _scan(self, pattern: str) -> Any:
        cursor: int | bytes = 0
        while True:
            cursor, keys = await self._call(self._redis.scan, cursor, match=pattern, count=200)
            for found in keys:
                yield found
            if int(cursor) == 0:
                return

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run one command; a lost or refused connection becomes ``StoreUnavailable``."""
        try:
            async with self._slots:
                if self._checked is None or not self._checked.done():
                    await self._check_once()
                return await fn(*args, **kwargs)
        except (self._errors.ConnectionError, self._errors.TimeoutError, OSError) as exc:
            raise StoreUnavailable(
                f"Redis at {self.url} did not answer ({type(exc).__name__}: {exc}); check that "
                "redis-server runs there and that SUPERDIALOG_STORE names it (with its password)"
            ) from exc

    async def _check_once(self) -> None:
        """The first command checks durability; concurrent first commands wait for it."""
        if self._checked is None:
            self._checked = asyncio.ensure_future(self._check_durability())
        try:
            await asyncio.shield(self._checked)
        except BaseException:
            if self._checked.done():
                self._checked = None  # failed (Redis down): the next command checks again
            raise

    async def _check_durability(self) -> None:
        """Warn once when the server acknowledges writes before they are on disk."""
        try:
            settings = await self._redis.config_get("append*")
        except self._errors.ResponseError:  # CONFIG is disabled on many managed services
            logger.info("Redis at %s does not allow CONFIG GET; make sure it runs with "
                        "appendonly yes and appendfsync always", self.url)
            return
        settings = {_str(k): _str(v) for k, v in settings.items()}
        if settings.get("appendonly") != "yes" or settings.get("appendfsync") != "always":
            logger.warning(
                "Redis at %s runs with appendonly=%s appendfsync=%s: acknowledged appends can "
                "be lost if Redis itself crashes; use appendonly yes and appendfsync always",
                self.url, settings.get("appendonly"), settings.get("appendfsync"))


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _text(lines: list[bytes]) -> bytes:
    """The stored lines as JSONL bytes (bad UTF-8 is then reported with its line number)."""
    return b"".join(line + b"\n" for line in lines)
