"""The append-only event log: the single source of truth of one conversation (SPEC §5).

Only the runtime appends. Appending stamps the event's ``version`` (1..N, contiguous) and
``at`` in place, without copying it, so the caller's reference *is* the logged event. The
JSONL form is one msgspec-encoded event per line, newline-terminated, so a store can append
lines as they come and a crash can at worst truncate the last line (which ``from_jsonl``
reports with the valid prefix kept).
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import overload

import msgspec

from .events import Degraded, Event, decode, encode, stamp

logger = logging.getLogger("superdialog_core.log")

# A stored line ends with its checksum, inside the JSON object so the line stays JSON:
# {...,"crc32":"1a2b3c4d"}: zlib.crc32 of the line without that member (the event's encoding).
_SEAL_KEY = b',"crc32":"'
_SEAL_LEN = len(_SEAL_KEY) + 8 + 2  # key, 8 hex digits, '"}'


class LogCorruptError(ValueError):
    """A JSONL log has a line that is not a valid event (SPEC §13: name the line, keep the prefix).

    ``line_number`` is 1-based in the text (blank lines count), ``reason`` says what is wrong,
    ``prefix`` is an ``EventLog`` of every valid event before that line, and ``source`` names
    the file when there is one.
    """

    def __init__(
        self,
        line_number: int,
        reason: str,
        prefix: EventLog,
        source: str | None = None,
        *,
        torn_tail: bool = False,
        session_id: str | None = None,
    ) -> None:
        self.line_number = line_number
        self.reason = reason
        self.prefix = prefix
        self.source = source
        self.torn_tail = torn_tail
        self.session_id = session_id
        where = f"{source}, line {line_number}" if source else f"line {line_number}"
        if session_id is not None and (source is None or session_id not in source):
            where += f" (session {session_id!r})"
        what = "a torn last line (an interrupted write)" if torn_tail else reason
        super().__init__(
            f"corrupt event log at {where}: {what}; the {len(prefix)} valid events before it "
            "are kept in .prefix (resume from them, or call the store's repair(session_id), "
            "which keeps them and cuts that line and everything after it)"
            + (f" [{reason}]" if torn_tail else "")
        )

    @property
    def line(self) -> int:
        """Alias of ``line_number`` (the name docs/internals.md uses)."""
        return self.line_number


class EventLog:
    """An append-only list of stamped events with versions 1..N.

    ``EventLog(events)`` takes already-stamped events (a loaded log) and refuses a gap;
    ``append`` stamps new ones. ``clock`` gives ``at`` (Unix seconds); tests pass a fixed one.
    """

    __slots__ = ("_clock", "_events")

    def __init__(
        self, events: Iterable[Event] = (), *, clock: Callable[[], float] = time.time
    ) -> None:
        self._clock = clock
        self._events: list[Event] = list(events)
        for index, event in enumerate(self._events):
            if not isinstance(event, Event):
                raise TypeError(
                    f"EventLog holds events only; item {index} is {type(event).__name__}"
                )
            if event.version != index + 1:
                got = [e.version for e in self._events[max(0, index - 2) : index + 3]]
                raise ValueError(
                    "event versions must be contiguous starting at 1: the first gap is at "
                    f"position {index}, which holds version {event.version} where "
                    f"{index + 1} was expected (versions around it: {got})"
                )

    # --- writing ------------------------------------------------------------------------

    def append(self, event: Event) -> Event:
        """Stamp ``event`` with the next version and the current time, store it, return it."""
        if not isinstance(event, Event):
            raise TypeError(f"only events can be logged, not {type(event).__name__}")
        if event.version != 0:
            raise ValueError(
                f"{type(event).__name__} is already stamped with version {event.version}: a "
                "logged event cannot be appended again; build a new event instead"
            )
        stamp(event, len(self._events) + 1, self._clock())
        self._events.append(event)
        return event

    def extend(self, events: Iterable[Event]) -> list[Event]:
        """Append each event in order; returns them (stamped)."""
        return [self.append(event) for event in events]

    # --- reading ------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """The last version (0 for an empty log)."""
        return len(self._events)

    def __len__(self) -> int:
        return len(self._events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self._events)

    @overload
    def __getitem__(self, index: int) -> Event: ...

    @overload
    def __getitem__(self, index: slice) -> list[Event]: ...

    def __getitem__(self, index: int | slice) -> Event | list[Event]:
        """By list index (0-based), like a list; use ``get`` to look up by version."""
        return self._events[index]

    def get(self, version: int) -> Event | None:
        """The event with this version, or None when there is none."""
        if 1 <= version <= len(self._events):
            return self._events[version - 1]
        return None

    def since(self, version: int) -> list[Event]:
        """Events with a version greater than ``version`` (what a store has not seen yet)."""
        return self._events[max(0, version) :]

    def __repr__(self) -> str:
        return f"EventLog(version={self.version})"

    # --- JSONL --------------------------------------------------------------------------

    def to_jsonl(self) -> str:
        """One JSON object per event, each line newline-terminated (empty log: empty text)."""
        return to_jsonl(self._events)

    @classmethod
    def from_jsonl(
        cls,
        text: str | bytes,
        *,
        source: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> EventLog:
        """Parse a JSONL log. Blank lines are skipped; a bad line raises ``LogCorruptError``.

        ``source`` (a file name) is named in the error.
        """
        if isinstance(text, str):
            text = text.encode("utf-8", "surrogatepass")
        log = cls(clock=clock)
        events = log._events
        lines = text.split(b"\n")
        last = len(lines)
        # A crash mid-append leaves the last line without its newline (or, on some file
        # systems, a tail of NUL bytes): that line is torn, not corrupt.
        torn_possible = not text.endswith(b"\n") or text.endswith(b"\0")
        for line_number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                event = decode(unseal(line))
            except (msgspec.ValidationError, msgspec.DecodeError, ValueError) as exc:
                torn = torn_possible and (
                    line_number == last or not any(rest.strip(b"\0 \r\t") for rest in lines[line_number:])
                )
                raise LogCorruptError(
                    line_number, _reason(exc, line), log, source, torn_tail=torn
                ) from exc
            expected = len(events) + 1
            if event.version != expected:
                raise LogCorruptError(
                    line_number,
                    f"event version {event.version} where {expected} was expected "
                    "(versions must run 1..N without gaps)",
                    log,
                    source,
                )
            events.append(event)
        return log


def to_jsonl(events: Iterable[Event]) -> str:
    """The JSONL form of ``events`` (used by the log and by stores appending a batch)."""
    parts = [encode_safely(event) for event in events]
    if not parts:
        return ""
    return (b"\n".join(parts) + b"\n").decode("utf-8")


def seal(line: bytes) -> bytes:
    """``line`` (one encoded event) with its checksum member appended (see ``_SEAL_KEY``)."""
    return b"%s%s%08x\"}" % (line[:-1], _SEAL_KEY, zlib.crc32(line))


def unseal(line: bytes) -> bytes:
    """The event's encoding from a stored line; raises ``ValueError`` on a checksum mismatch.

    A line without a checksum (written before stores added one) is returned as it is.
    """
    line = line.rstrip(b"\r")
    if len(line) < _SEAL_LEN or line[-_SEAL_LEN : -10] != _SEAL_KEY:
        return line
    body = line[:-_SEAL_LEN] + b"}"
    try:
        written = int(line[-10:-2], 16)
    except ValueError:
        raise ValueError("the line's checksum is not 8 hex digits") from None
    if zlib.crc32(body) != written or line[-2:] != b'"}':
        raise ValueError(
            f"checksum mismatch (the line says {written:08x}, its content gives "
            f"{zlib.crc32(body):08x}): the line was altered or damaged after it was written")
    return body


def encode_safely(event: Event) -> bytes:
    """The event's encoding; an event that cannot be encoded becomes a ``degraded`` line.

    Persistence must never stop (SPEC §13): the replacement keeps the event's version and time
    and says what could not be stored. Text entering the engine is cleaned at the boundary, so
    this is a last line of defence, logged loudly when it fires.
    """
    try:
        return encode(event)
    except (msgspec.EncodeError, TypeError, ValueError, OverflowError, RecursionError) as exc:
        detail = f"unserialisable_event:{type(event).__name__}: {type(exc).__name__}: {exc}"
        logger.error("event %d could not be encoded; storing a degraded event instead: %s",
                     event.version, detail)
        replacement = Degraded(component="log", detail=detail.encode("utf-8", "replace").decode())
        stamp(replacement, event.version, event.at)
        return encode(replacement)


def encode_line(event: Event) -> bytes:
    """What a store writes for one event: its safe encoding, sealed with a checksum (no newline)."""
    return seal(encode_safely(event))


def _reason(exc: Exception, line: bytes) -> str:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as bad:
        return f"not UTF-8 text ({bad.reason} at byte {bad.start} of the line)"
    shown = line if len(line) <= 80 else line[:77] + b"..."
    return f"{exc} (line starts {shown.decode('utf-8', 'replace')!r})"


__all__ = ["EventLog", "LogCorruptError", "encode_line", "encode_safely", "seal", "to_jsonl", "unseal"]
