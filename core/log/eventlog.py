"""The append-only event log: the single source of truth of one conversation (SPEC §5).

Only the runtime appends. Appending stamps the event's ``version`` (1..N, contiguous) and
``at`` in place, without copying it, so the caller's reference *is* the logged event. The
JSONL form is one msgspec-encoded event per line, newline-terminated, so a store can append
lines as they come and a crash can at worst truncate the last line (which ``from_jsonl``
reports with the valid prefix kept).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import overload

import msgspec

from .events import Event, decode, encode, stamp


class LogCorruptError(ValueError):
    """A JSONL log has a line that is not a valid event (SPEC §13: name the line, keep the prefix).

    ``line_number`` is 1-based in the text (blank lines count), ``reason`` says what is wrong,
    ``prefix`` is an ``EventLog`` of every valid event before that line, and ``source`` names
    the file when there is one.
    """

    def __init__(
        self, line_number: int, reason: str, prefix: EventLog, source: str | None = None
    ) -> None:
        self.line_number = line_number
        self.reason = reason
        self.prefix = prefix
        self.source = source
        where = f"{source}, line {line_number}" if source else f"line {line_number}"
        super().__init__(
            f"corrupt event log at {where}: {reason}; the {len(prefix)} valid events before it "
            "are kept in .prefix (resume from them, or repair the file by removing that line "
            "and everything after it)"
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
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as exc:
                # Find the line holding the bad byte so the error still names it.
                line_number = text[: exc.start].count(b"\n") + 1
                good = text[: exc.start].rsplit(b"\n", 1)[0] if line_number > 1 else b""
                prefix = cls.from_jsonl(good, source=source, clock=clock) if good else cls()
                raise LogCorruptError(
                    line_number, f"not UTF-8 text ({exc.reason})", prefix, source
                ) from exc
        log = cls(clock=clock)
        events = log._events
        for line_number, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                event = decode(line)
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                raise LogCorruptError(line_number, _reason(exc, line), log, source) from exc
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
    parts = [encode(event) for event in events]
    if not parts:
        return ""
    return (b"\n".join(parts) + b"\n").decode("utf-8")


def _reason(exc: Exception, line: str) -> str:
    shown = line if len(line) <= 80 else line[:77] + "..."
    return f"{exc} (line starts {shown!r})"


__all__ = ["EventLog", "LogCorruptError", "to_jsonl"]
