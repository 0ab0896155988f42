"""What one reply has said: its segments, the one being streamed, and their log entries.

Speech integrity (SPEC §6.6) lives here: an assistant utterance is logged from exactly the
pieces that were yielded to the caller, once, when its segment ends, or from the yielded
prefix (``interrupted=True``) when the consumer stopped early. Nothing that was not streamed
is ever logged, and the joining spaces between segments belong to no segment.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from ..log.events import Event, Utterance
from ..roles.models import TalkerToolCall
from ..values.clean import clean_text


@dataclass(slots=True)
class Segment:
    """One spoken unit: a Talker stream, a verbatim/exit line, a filler rung, a prompt or a line.

    ``checkpoint`` is where a Talker segment was rendered, or whose line a verbatim is;
    ``entry_version`` ties a say_verbatim line to one entry of its checkpoint (spoken once per
    entry).
    """

    kind: str
    spoke_from: int
    text: str = ""  # fixed lines: the whole text; Talker segments: filled as pieces arrive
    purpose: str | None = None
    checkpoint: str | None = None
    entry_version: int | None = None
    interruptible: bool = True

    @property
    def filler(self) -> bool:
        return self.kind == "filler"


@dataclass
class Reply:
    """The assistant side of one turn (or of an opening or an external event)."""

    emit: Callable[[Event], Event]
    texts: list[str] = field(default_factory=list)
    talker_at: set[str] = field(default_factory=set)
    lines_at: set[str] = field(default_factory=set)  # checkpoints whose say_verbatim was spoken
    interruptible: bool = True
    stopped: bool = False  # the consumer stopped early (barge-in): no more speech this turn
    cut: bool = False  # the barrier ladder ended the reply before the decision landed
    followed_through: bool = False  # at most one follow-through per reply
    superseded: bool = False  # a newer turn began while this stream was still open
    on_close: list[Any] = field(default_factory=list)  # futures resolved when the reply closes
    _open: Segment | None = None
    _pieces: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """Everything spoken so far, segments joined by single spaces (``Turn.text``)."""
        return " ".join(self.texts)

    def begin(self, segment: Segment) -> None:
        if self._open is not None:
            raise RuntimeError("a segment is already open; finish it before starting another")
        self._open = segment
        self._pieces = []
        if segment.kind == "talker" and segment.checkpoint is not None:
            self.talker_at.add(segment.checkpoint)

    def separator_due(self) -> bool:
        """True before the first piece of any segment that follows spoken text."""
        return bool(self.texts) and not self._pieces

    def add(self, piece: str) -> None:
        self._pieces.append(piece)

    def finish(self, *, interrupted: bool = False) -> Utterance | None:
        """Log the open segment from what was yielded; nothing is logged if nothing was."""
        segment, self._open = self._open, None
        if segment is None or not self._pieces:
            return None
        text = "".join(self._pieces)
        self._pieces = []
        self.texts.append(text)
        if not segment.interruptible:
            self.interruptible = False
        if segment.kind == "verbatim" and segment.entry_version is not None:
            self.lines_at.add(segment.checkpoint or "")
        event = self.emit(
            Utterance(
                role="assistant",
                text=text,
                spoke_from_version=segment.spoke_from,
                interrupted=interrupted,
                filler=segment.filler,
                kind=segment.kind,
                purpose=segment.purpose,
                # A say_verbatim line names its checkpoint, so the fold knows it was spoken
                # at this entry (exit lines are logged after the move and name none).
                checkpoint=segment.checkpoint if segment.kind == "verbatim"
                and segment.entry_version is not None else None,
            )
        )
        assert isinstance(event, Utterance)
        return event

    def abort(self) -> None:
        """The consumer stopped: log the yielded prefix of the open segment as interrupted."""
        self.stopped = True
        if self._open is not None:
            self.finish(interrupted=True)


class _Trim:
    """Drops leading and trailing whitespace of a stream without delaying any word."""

    __slots__ = ("_pending", "_started")

    def __init__(self) -> None:
        self._started = False
        self._pending = ""

    def feed(self, text: str) -> str:
        if not text:
            return ""
        if not self._started:
            text = text.lstrip()
            if not text:
                return ""
            self._started = True
        text = self._pending + text
        kept = text.rstrip()
        self._pending = text[len(kept) :]
        return kept


class TalkerStream:
    """A Talker stream passed through the never_say filter and trimmed; errors become data.

    ``pieces()`` yields what may be spoken. A model error ends the stream and is kept in
    ``error`` so the runtime can log it and speak the recovery line instead of crashing.
    """

    def __init__(self, source: AsyncIterator[str], never_say: Any | None,
                 on_tool_call: Callable[[TalkerToolCall], Any] | None = None) -> None:
        self._source = source
        self._filter = never_say
        self._on_tool_call = on_tool_call
        self.error: Exception | None = None
        self.replaced = 0  # unencodable code points replaced in what the Talker streamed
        self.tool_calls = 0  # host function tools the Talker called in this segment

    async def pieces(self) -> AsyncIterator[str]:
        trim = _Trim()
        source = self._source
        try:
            async for chunk in source:
                if not isinstance(chunk, str):
                    if isinstance(chunk, TalkerToolCall):
                        # The host runs it; the engine logs it (a function_call event).
                        self.tool_calls += 1
                        if self._on_tool_call is not None:
                            self._on_tool_call(chunk)
                        continue
                    raise TypeError(f"the Talker streamed a {type(chunk).__name__}, not text")
                if not chunk.isascii():
                    chunk, count = clean_text(chunk)
                    self.replaced += count
                text = self._filter.feed(chunk) if self._filter is not None else chunk
                text = trim.feed(text)
                if text:
                    yield text
            tail = trim.feed(self._filter.close()) if self._filter is not None else ""
            if tail:
                yield tail
        except Exception as exc:  # a model error is data: logged and answered by the runtime
            self.error = exc
        finally:
            closer = getattr(source, "aclose", None)
            if closer is not None:
                await closer()


class _OnePiece:
    """A fixed line as a stream of one piece (nothing for an empty line).

    A plain async iterator rather than an async generator: no generator frame, no asyncio
    first-iteration hook and no WeakSet entry, for every fixed line and empty follow-through.
    """

    __slots__ = ("_text",)

    def __init__(self, text: str) -> None:
        self._text = text

    def __aiter__(self) -> _OnePiece:
        return self

    async def __anext__(self) -> str:
        text = self._text
        if not text:
            raise StopAsyncIteration
        self._text = ""
        return text

    async def aclose(self) -> None:
        self._text = ""


def one_piece(text: str) -> AsyncIterator[str]:
    """A fixed line as a stream of one piece."""
    return _OnePiece(text)


__all__ = ["Reply", "Segment", "TalkerStream", "one_piece"]
