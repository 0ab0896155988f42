"""Event types of the append-only conversation log.

Events are frozen ``msgspec`` structs, tagged on ``type``. msgspec was chosen over pydantic
for events because the log is the hot path: a struct is ~3x smaller than a pydantic model
instance (SPEC §14 asks for at most 500 bytes per logged event), encodes to JSON without an
intermediate dict, and decodes a whole JSONL log through one tagged-union decoder.

Every event carries ``version`` (0 until the log stamps it, then 1..N, contiguous) and ``at``
(Unix seconds, stamped on append). Both are stamped in place, without copying the event
(``msgspec.structs.force_setattr``); nothing else ever mutates an event.

JSON form: one object per event, ``{"type": "<tag>", "version": N, "at": T, ...fields}``;
fields equal to their default are omitted. See ``docs/events.md`` for each type.
"""

from __future__ import annotations

from typing import Any, Literal, Union

import msgspec

Role = Literal["user", "assistant"]
SlotStatus = Literal["provisional", "accepted", "confirmed"]
WrittenBy = Literal["director", "caller", "tool", "rule", "call_start", "policy"]
AdvanceBy = Literal["director", "expr", "pipeline", "interrupt", "policy", "init"]
NoteKind = Literal["steer", "repair", "instruction"]


class Event(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type"):
    """Base of every event. ``version`` and ``at`` are stamped by ``EventLog.append``."""

    version: int = 0
    at: float = 0.0


class SessionStart(Event, tag="session_start", kw_only=True):
    """The call began. ``anchor`` is the ISO 8601 time (with offset) relative dates resolve against."""

    session_id: str
    playbook_hash: str
    anchor: str
    timezone: str = "UTC"
    call: dict[str, Any] = {}
    env_keys: list[str] = []


class Utterance(Event, tag="utterance", kw_only=True):
    """Something said. Assistant utterances carry the state version they were rendered from.

    ``kind`` says where an assistant line came from: ``talker`` (a Talker segment), ``verbatim``
    (a checkpoint's say_verbatim or exit line), ``filler`` (barrier ladder rungs), ``prompt``
    (silence prompts), ``line`` (recovery, start-failure and other canned lines); and for lines
    this engine did not produce: ``say`` (the host's ``session.say`` or any other assistant
    message), ``fallback`` (a fallback LLM answered instead of the Talker), ``other_agent``
    (another agent's line while it had the call). ``agent`` names who handled the line when it
    was not this engine: the other agent (for its user and agent lines) or the fallback LLM.
    A user utterance with ``agent`` set was handled by another agent: context, not a turn.
    """

    role: Role
    text: str
    spoke_from_version: int | None = None
    interrupted: bool = False
    filler: bool = False
    kind: str | None = None
    purpose: str | None = None
    message_id: str | None = None
    checkpoint: str | None = None  # a say_verbatim line: the checkpoint whose line it is
    # Set when ``text`` is only the prefix of an over-long caller utterance (policies.caps):
    # the whole utterance's length in characters and its sha256 (hex of its UTF-8).
    text_length: int | None = None
    text_sha256: str | None = None
    agent: str | None = None  # who handled it when not this engine (see above)


class SpeechCorrection(Event, tag="speech_correction", kw_only=True):
    """After the fact: the caller heard only ``heard_text`` of utterance ``utterance_version``."""

    utterance_version: int
    heard_text: str


class UtteranceSuperseded(Event, tag="utterance_superseded", kw_only=True):
    """A user utterance was replaced by a later one (LiveKit regenerated with a new message)."""

    utterance_version: int
    by_version: int | None = None


class SlotWrite(Event, tag="slot_write", kw_only=True):
    """A slot took a value (or the same value with another status)."""

    key: str
    value: Any
    status: SlotStatus
    by: WrittenBy


class SlotRefused(Event, tag="slot_refused", kw_only=True):
    """A value was not written. ``message`` is worded for the model's next question."""

    key: str
    value: Any = None
    by: WrittenBy = "director"
    message: str


class SlotClear(Event, tag="slot_clear", kw_only=True):
    """A slot (or a stored tool result, ``key`` = ``results.<name>``) was emptied."""

    key: str
    reason: str
    by: str = "director"


class Advance(Event, tag="advance", kw_only=True):
    """The conversation moved to another checkpoint."""

    from_: str | None = msgspec.field(name="from", default=None)
    to: str
    rule_id: str
    by: AdvanceBy


class SteeringNote(Event, tag="steering_note", kw_only=True):
    """A note for the Talker's next render. Notes queue until a ``note_consumed`` event."""

    text: str
    kind: NoteKind = "steer"


class NoteConsumed(Event, tag="note_consumed", kw_only=True):
    """The Talker render that began at ``spoke_from_version`` showed every note up to ``upto``."""

    upto: int


class ToolCall(Event, tag="tool_call", kw_only=True):
    """A tool was called (args redacted). ``attempt`` counts from 1."""

    tool: str
    args: dict[str, Any] = {}
    attempt: int = 1
    pipeline: str | None = None


class ToolResult(Event, tag="tool_result", kw_only=True):
    """A tool's outcome, as data. ``store_as`` names the ``results`` key it is stored under."""

    tool: str
    ok: bool
    status: int | None = None
    data: Any = None
    error: str | None = None
    duration_ms: float = 0.0
    store_as: str | None = None
    attempt: int = 1
    pipeline: str | None = None


class EnvWrite(Event, tag="env_write", kw_only=True):
    """An env value was set. The log records the key only, never the value."""

    key: str
    by: str = "start"


class Verdict(Event, tag="verdict", kw_only=True):
    """The Director's parsed verdict as applied, for replay."""

    verdict: dict[str, Any]
    latency_ms: float = 0.0
    attempts: int = 1
    user_version: int | None = None


class External(Event, tag="external", kw_only=True):
    """An outside event: silence, a webhook, a timer."""

    kind: str
    name: str
    payload: dict[str, Any] = {}


class Degraded(Event, tag="degraded", kw_only=True):
    """Something went worse than planned; the conversation went on.

    ``model_failure``: a call-level failure of a model role (``component`` is ``talker`` or
    ``director``: an error, a timeout, or output unparseable after the retry). These count
    toward ``policies.model_failure``; per-field findings never do.
    """

    component: str
    detail: str
    model_failure: bool = False


class FunctionCall(Event, tag="function_call", kw_only=True):
    """The Talker (or, with ``agent`` set, another agent) called a host function tool.

    A LiveKit ``@function_tool`` the host runs, not a playbook tool: it never reaches
    ``results.*`` or ``calls.*``. ``arguments`` is the JSON text the model sent.
    """

    call_id: str
    name: str
    arguments: str = "{}"
    agent: str | None = None


class FunctionResult(Event, tag="function_result", kw_only=True):
    """What a host function tool returned (``output`` as the host reported it)."""

    call_id: str
    name: str = ""
    output: str = ""
    is_error: bool = False
    agent: str | None = None


class LogRepaired(Event, tag="log_repaired", kw_only=True):
    """On resume, the stored log's damaged tail was cut (a torn last line, or ``repair()``)."""

    cut_bytes: int
    cut_records: int = 0
    line: int | None = None
    reason: str | None = None


class SessionEnd(Event, tag="session_end", kw_only=True):
    """The call ended with ``outcome``."""

    outcome: str | None = None
    reason: str | None = None


AnyEvent = Union[  # noqa: UP007 - msgspec needs a Union object for tagged decoding
    SessionStart,
    Utterance,
    SpeechCorrection,
    UtteranceSuperseded,
    SlotWrite,
    SlotRefused,
    SlotClear,
    Advance,
    SteeringNote,
    NoteConsumed,
    ToolCall,
    ToolResult,
    EnvWrite,
    Verdict,
    External,
    Degraded,
    LogRepaired,
    SessionEnd,
    FunctionCall,
    FunctionResult,
]

EVENT_TYPES: dict[str, type[Event]] = {
    cls.__struct_config__.tag: cls  # type: ignore[misc]
    for cls in AnyEvent.__args__  # type: ignore[attr-defined]
}

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(AnyEvent)


def encode(event: Event) -> bytes:
    """The event's JSON form (one line, no newline)."""
    return _encoder.encode(event)


def decode(line: bytes | str) -> Event:
    """Parse one JSON line into its event type; raises ``msgspec.ValidationError``/``DecodeError``."""
    return _decoder.decode(line)


def stamp(event: Event, version: int, at: float) -> None:
    """Stamp ``version`` and ``at`` in place (only the log calls this)."""
    msgspec.structs.force_setattr(event, "version", version)
    msgspec.structs.force_setattr(event, "at", at)


__all__ = [
    "EVENT_TYPES",
    "Advance",
    "AnyEvent",
    "Degraded",
    "EnvWrite",
    "Event",
    "External",
    "FunctionCall",
    "FunctionResult",
    "LogRepaired",
    "NoteConsumed",
    "SessionEnd",
    "SessionStart",
    "SlotClear",
    "SlotRefused",
    "SlotWrite",
    "SpeechCorrection",
    "SteeringNote",
    "ToolCall",
    "ToolResult",
    "Utterance",
    "UtteranceSuperseded",
    "Verdict",
    "decode",
    "encode",
    "stamp",
]
