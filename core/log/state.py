"""ConversationState: the incremental fold of the event log (SPEC §5).

State is derived from the log and never written beside it: ``apply(event)`` is the only
mutator, and it costs O(1) per event (the note queue and the counters are kept
incrementally; a correction finds its utterance by a binary search over the version-sorted
transcript), so turn 1,000 costs what turn 10 costs. ``fold(log, playbook)``
is the same loop from scratch; a property test proves the two agree.

The fold applies what the log says without judging it: the confirmation rules live in
``slots.py``, which *plans* the events the runtime then appends.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from operator import attrgetter
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from . import events as ev
from .records import ResultState, SlotState, TranscriptEntry

if TYPE_CHECKING:
    from ..format.playbook import Playbook

_VERSION = attrgetter("version")

# Fields compared by ``snapshot()`` (and by the fold-equivalence property test).
STATE_FIELDS: tuple[str, ...] = (
    "version", "session_id", "playbook_hash", "checkpoint", "checkpoint_entered_version",
    "slots", "transcript", "results", "calls", "env_keys", "ended", "outcome", "end_reason",
    "anchor", "timezone", "call", "pending_notes", "refusals", "denied",
    "user_turns_in_checkpoint", "silence_count", "verbatim_spoken",
    "talker_segments_in_checkpoint", "last_pipeline_version", "degraded_count",
    "first_user_message", "function_calls", "model_failures",
)


class ConversationState:
    """Everything the engine knows about one call, as of ``version``.

    Read it freely; change it only through ``apply`` (the runtime's ``emit`` appends an event
    to the log and applies it here in one step). Values in ``slots`` and ``results`` are the
    event's own objects: treat them as read-only.
    """

    def __init__(self, playbook: Playbook) -> None:
        self.playbook = playbook
        self._model_chars = playbook.policies.caps.model_chars
        self.version = 0
        self.session_id: str | None = None
        self.playbook_hash: str | None = None
        self.checkpoint: str | None = None
        self.checkpoint_entered_version = 0
        self.slots: dict[str, SlotState] = {}
        self.transcript: list[TranscriptEntry] = []
        self.results: dict[str, ResultState] = {}
        self.calls: dict[str, int] = {}
        self.env_keys: set[str] = set()
        self.ended = False
        self.outcome: str | None = None
        self.end_reason: str | None = None
        self.anchor: datetime | None = None
        self.timezone = playbook.guidelines.timezone
        self.call: dict[str, Any] = {}
        # SteeringNote events not yet shown to the Talker, oldest first (SPEC §5: a queue).
        self.pending_notes: deque[ev.SteeringNote] = deque()
        self._refusals: deque[ev.SlotRefused] = deque()
        # Slots whose last event was a deny: still needed, read back again (SPEC §4.3).
        self.denied: set[str] = set()
        self.user_turns_in_checkpoint = 0
        self.silence_count = 0
        self.verbatim_spoken: set[str] = set()
        self.talker_segments_in_checkpoint = 0
        self.last_pipeline_version: int | None = None
        self.degraded_count = 0
        # Host function tools (FunctionCall / FunctionResult events) since the caller's last
        # turn: the Talker sees them with its next segment. Never in ``results``/``calls``.
        self.function_calls: list[ev.FunctionCall | ev.FunctionResult] = []
        # Call-level model failures in a row, per role (policies.model_failure).
        self.model_failures: dict[str, int] = {}
        # call.first_user_message (SPEC §4.5): the caller's first words, once they are said.
        self.first_user_message: str | None = None
        # Utterances are looked up by version with a binary search over the transcript (it is
        # version-sorted): O(log n) and no index to keep (~70 bytes an utterance, SPEC §14).
        # Index of each transcript entry changed after it was appended (a correction or a
        # supersede), in order: readers that keep a view of the transcript incrementally
        # (the Talker's packing) redo it only from the lowest index they have not seen.
        self.transcript_edits: list[int] = []
        # Readers' caches of views derived from this state (not state: never compared).
        self.view_cache: dict[str, Any] = {}
        self._scope_version = -1
        self._scope_base: dict[str, Any] = {}
        self._scope_extra_key: tuple[Any, ...] | None = None
        self._scope_extra: dict[str, Any] = {}

    # --- folding --------------------------------------------------------------------------

    @classmethod
    def fold(cls, log: Iterable[ev.Event], playbook: Playbook) -> ConversationState:
        """The state after every event of ``log`` (an ``EventLog`` or stamped events in order)."""
        state = cls(playbook)
        for event in log:
            state.apply(event)
        return state

    def apply(self, event: ev.Event) -> None:
        """Apply the next logged event (its version must be exactly ``version + 1``)."""
        if event.version != self.version + 1:
            raise ValueError(
                f"state at version {self.version} cannot apply {type(event).__name__} with "
                f"version {event.version}: apply logged events once each, in log order"
            )
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)
        self.version = event.version

    # --- per event ------------------------------------------------------------------------

    def _session_start(self, event: ev.SessionStart) -> None:
        self.session_id = event.session_id
        self.playbook_hash = event.playbook_hash
        self.timezone = event.timezone
        self.call = dict(event.call)
        self.env_keys.update(event.env_keys)
        self.anchor = _parse_anchor(event)

    def _utterance(self, event: ev.Utterance) -> None:
        text = event.text
        if len(text) > self._model_chars:  # the models see a bounded part (policies.caps)
            text = text[: self._model_chars]
        entry = TranscriptEntry(
            version=event.version,
            role=event.role,
            text=text,
            heard_text=text,
            spoke_from_version=event.spoke_from_version,
            interrupted=event.interrupted,
            filler=event.filler,
            kind=event.kind,
            purpose=event.purpose,
            message_id=event.message_id,
            agent=event.agent,
        )
        self.transcript.append(entry)
        if event.role == "user" and event.agent is not None:
            pass  # another agent's turn: context, never a turn of this playbook's
        elif event.role == "user":
            self.function_calls = []
            self.user_turns_in_checkpoint += 1
            if self.first_user_message is None:
                self.first_user_message = event.text
            self.silence_count = 0
        elif event.kind == "verbatim" and event.checkpoint is not None \
                and event.checkpoint == self.checkpoint:
            # A say_verbatim line is spoken once per entry of its checkpoint.
            self.verbatim_spoken.add(self.checkpoint)
        elif event.kind == "talker":
            self.talker_segments_in_checkpoint += 1
            self.model_failures.pop("talker", None)

    def _speech_correction(self, event: ev.SpeechCorrection) -> None:
        entry = self.entry(event.utterance_version)
        if entry is not None:  # a correction of a non-utterance changes nothing it could see
            # Heard in full (whitespace aside) is not an interruption: a later read-back
            # confirmation must not be refused as read_back_not_fully_heard.
            full = event.heard_text.strip() == entry.text.strip()
            entry.heard_text = entry.text if full else event.heard_text
            entry.interrupted = not full
            self.transcript_edits.append(self._index_of(event.utterance_version))

    def _utterance_superseded(self, event: ev.UtteranceSuperseded) -> None:
        entry = self.entry(event.utterance_version)
        if entry is None or entry.superseded:
            return
        entry.superseded = True
        self.transcript_edits.append(self._index_of(event.utterance_version))
        # A replaced utterance was never a turn of the caller's.
        if entry.role == "user" and entry.version > self.checkpoint_entered_version:
            self.user_turns_in_checkpoint = max(0, self.user_turns_in_checkpoint - 1)

    def _slot_write(self, event: ev.SlotWrite) -> None:
        self.slots[event.key] = SlotState(event.value, event.status, event.by, event.version)
        self.denied.discard(event.key)

    def _slot_refused(self, event: ev.SlotRefused) -> None:
        self._refusals.append(event)

    def _slot_clear(self, event: ev.SlotClear) -> None:
        key = event.key
        if key.startswith("results."):
            self.results.pop(key[len("results.") :], None)
            return
        self.slots.pop(key, None)
        if event.reason == "denied":
            self.denied.add(key)
        else:
            self.denied.discard(key)

    def _advance(self, event: ev.Advance) -> None:
        self.checkpoint = event.to
        self.checkpoint_entered_version = event.version
        self.user_turns_in_checkpoint = 0
        self.silence_count = 0
        self.talker_segments_in_checkpoint = 0
        self.verbatim_spoken = set()
        if event.rule_id == "policy:model_failure":
            self.model_failures = {}  # the policy acted: count afresh

    def _steering_note(self, event: ev.SteeringNote) -> None:
        self.pending_notes.append(event)

    def _note_consumed(self, event: ev.NoteConsumed) -> None:
        notes = self.pending_notes
        while notes and notes[0].version <= event.upto:
            notes.popleft()
        refusals = self._refusals
        while refusals and refusals[0].version <= event.upto:
            refusals.popleft()

    def _tool_call(self, event: ev.ToolCall) -> None:
        self.calls[event.tool] = self.calls.get(event.tool, 0) + 1

    def _tool_result(self, event: ev.ToolResult) -> None:
        if event.store_as:
            self.results[event.store_as] = ResultState(
                event.tool, event.ok, event.status, event.data, event.error, event.version
            )
        if event.store_as == "pipeline" and event.pipeline is not None:
            self.last_pipeline_version = event.version

    def _env_write(self, event: ev.EnvWrite) -> None:
        self.env_keys.add(event.key)

    def _external(self, event: ev.External) -> None:
        if event.kind == "silence":
            self.silence_count += 1

    def _degraded(self, event: ev.Degraded) -> None:
        self.degraded_count += 1
        if event.model_failure:
            role = event.component
            self.model_failures[role] = self.model_failures.get(role, 0) + 1

    def _verdict(self, event: ev.Verdict) -> None:
        self.model_failures.pop("director", None)

    def _function_call(self, event: ev.FunctionCall | ev.FunctionResult) -> None:
        if event.agent is None:
            self.function_calls.append(event)

    def _session_end(self, event: ev.SessionEnd) -> None:
        self.ended = True
        self.outcome = event.outcome
        self.end_reason = event.reason

    # --- reading --------------------------------------------------------------------------

    @property
    def refusals(self) -> list[str]:
        """``slot_refused`` messages not yet shown to the Talker (oldest first)."""
        return [event.message for event in self._refusals]

    @property
    def refusal_events(self) -> list[ev.SlotRefused]:
        return list(self._refusals)

    def filled(self, key: str) -> bool:
        """The slot holds a value (only filled slots are present in ``slots``)."""
        slot = self.slots.get(key)
        return slot is not None and slot.value is not None

    def value(self, key: str, default: Any = None) -> Any:
        slot = self.slots.get(key)
        return default if slot is None else slot.value

    def entry(self, version: int) -> TranscriptEntry | None:
        """The transcript entry of the utterance logged at ``version``, if any."""
        transcript = self.transcript
        index = bisect_left(transcript, version, key=_VERSION)
        if index < len(transcript) and transcript[index].version == version:
            return transcript[index]
        return None

    def _index_of(self, version: int) -> int:
        """Index of the first transcript entry at or after ``version``."""
        return bisect_left(self.transcript, version, key=_VERSION)

    def last_user(self) -> TranscriptEntry | None:
        """The caller's latest utterance that was not superseded."""
        for entry in reversed(self.transcript):
            if entry.role == "user" and not entry.superseded:
                return entry
        return None

    def last_assistant(
        self, before_version: int | None = None, *, skip_filler: bool = True
    ) -> TranscriptEntry | None:
        """The latest assistant utterance before ``before_version`` (default: the end).

        With ``skip_filler`` barrier rungs (filler lines) are passed over, since a caller's
        answer is never an answer to "one moment".
        """
        for entry in self._before(before_version):
            if entry.role != "assistant":
                continue
            if skip_filler and (entry.filler or entry.kind == "filler"):
                continue
            return entry
        return None

    def read_back_target(self, user_version: int) -> TranscriptEntry | None:
        """What the caller's utterance at ``user_version`` answers (SPEC §4.3).

        Walks back past filler and superseded utterances; returns the first assistant
        utterance, or None when a live user utterance (or nothing) comes first.
        """
        for entry in self._before(user_version):
            if entry.role == "user":
                if entry.superseded:
                    continue
                return None
            if entry.filler or entry.kind == "filler":
                continue
            return entry
        return None

    def _before(self, version: int | None) -> Iterable[TranscriptEntry]:
        end = len(self.transcript) if version is None else self._index_of(version)
        for i in range(end - 1, -1, -1):
            yield self.transcript[i]

    # --- scope ----------------------------------------------------------------------------

    def scope(
        self, env: dict[str, Any] | None = None, pipeline: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The namespaces expressions and templates read (docs/internals.md, SPEC §3).

        Built once per state version and cached, so a turn that evaluates many rules pays
        once. ``env`` (held by the runtime, never in the state) and ``pipeline``
        (``{"ok", "failed"}``, only in a pipeline-owned checkpoint's rules) are added when given.
        The result is shared: read it, do not change it.
        """
        if self._scope_version != self.version:
            self._scope_base = self._build_scope()
            self._scope_version = self.version
            self._scope_extra_key = None
        if env is None and pipeline is None:
            return self._scope_base
        cached = self._scope_extra_key
        # env is compared by identity: the runtime passes the same dict each time.
        if cached is None or cached[0] is not env or cached[1] != pipeline:
            extra = dict(self._scope_base)
            if env is not None:
                extra["env"] = env
            if pipeline is not None:
                extra["pipeline"] = pipeline
            self._scope_extra = extra
            self._scope_extra_key = (env, pipeline)
        return self._scope_extra

    def _build_scope(self) -> dict[str, Any]:
        call = dict(self.call)
        call.setdefault("session_id", self.session_id)
        if call.get("first_user_message") is None and self.first_user_message is not None:
            call["first_user_message"] = self.first_user_message
        if call.get("end_reason") is None and self.end_reason is not None:
            call["end_reason"] = self.end_reason
        return {
            "slots": {key: slot.value for key, slot in self.slots.items()},
            "results": {
                name: {"ok": r.ok, "status": r.status, "data": r.data, "error": r.error}
                for name, r in self.results.items()
            },
            "call": call,
            "calls": dict(self.calls),
            "env": {},
            "clock": self._clock(),
        }

    def _clock(self) -> dict[str, str]:
        """``clock.*`` (SPEC §3): the call's clock in ``guidelines.timezone``, read from the
        session's anchor (its start time), so a replay renders what the call rendered."""
        anchor = self.anchor
        if anchor is None:
            return {}
        cached = self.view_cache.get("clock")
        if cached is not None and cached[0] is anchor:
            return cached[1]  # type: ignore[no-any-return]
        try:
            local = anchor.astimezone(ZoneInfo(self.timezone)) if self.timezone != "UTC" else anchor.astimezone(timezone.utc)
        except (ZoneInfoNotFoundError, ValueError):
            local = anchor
        clock = {"date": local.date().isoformat(), "time": local.strftime("%H:%M"),
                 "weekday": _WEEKDAYS[local.weekday()], "datetime": local.isoformat(timespec="minutes")}
        self.view_cache["clock"] = (anchor, clock)
        return clock

    # --- comparison -----------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Every folded field as plain data (for tests, traces and debugging)."""
        out: dict[str, Any] = {}
        for name in STATE_FIELDS:
            value = getattr(self, name)
            if name == "pending_notes":
                value = [ev.encode(note) for note in value]
            elif isinstance(value, list | dict | set):
                value = value.copy()
            out[name] = value
        out["transcript"] = [_entry_tuple(e) for e in self.transcript]
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConversationState):
            return NotImplemented
        return self.snapshot() == other.snapshot()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"ConversationState(version={self.version}, checkpoint={self.checkpoint!r}, "
            f"slots={sorted(self.slots)}, ended={self.ended})"
        )


# Event type -> the method that folds it (types not listed, such as verdict, only advance
# the version). One table per process, not per call.
_HANDLERS: dict[type, Callable[[ConversationState, Any], None]] = {
    ev.SessionStart: ConversationState._session_start,
    ev.Utterance: ConversationState._utterance,
    ev.SpeechCorrection: ConversationState._speech_correction,
    ev.UtteranceSuperseded: ConversationState._utterance_superseded,
    ev.SlotWrite: ConversationState._slot_write,
    ev.SlotRefused: ConversationState._slot_refused,
    ev.SlotClear: ConversationState._slot_clear,
    ev.Advance: ConversationState._advance,
    ev.SteeringNote: ConversationState._steering_note,
    ev.NoteConsumed: ConversationState._note_consumed,
    ev.ToolCall: ConversationState._tool_call,
    ev.ToolResult: ConversationState._tool_result,
    ev.EnvWrite: ConversationState._env_write,
    ev.External: ConversationState._external,
    ev.Degraded: ConversationState._degraded,
    ev.Verdict: ConversationState._verdict,
    ev.FunctionCall: ConversationState._function_call,
    ev.FunctionResult: ConversationState._function_call,
    ev.SessionEnd: ConversationState._session_end,
}


def _entry_tuple(entry: TranscriptEntry) -> tuple[Any, ...]:
    return (
        entry.version, entry.role, entry.text, entry.heard_text, entry.spoke_from_version,
        entry.interrupted, entry.filler, entry.kind, entry.purpose, entry.superseded,
        entry.message_id, entry.agent,
    )


_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def _parse_anchor(event: ev.SessionStart) -> datetime:
    """The session's date anchor as an aware datetime (a naive one is read in its timezone)."""
    text = event.anchor
    try:
        anchor = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(
            f"session_start (version {event.version}): anchor {text!r} is not an ISO 8601 "
            "time; the runtime must log the call's start time, e.g. 2026-11-30T09:00:00+00:00"
        ) from exc
    if anchor.tzinfo is None:
        try:
            zone: Any = ZoneInfo(event.timezone) if event.timezone != "UTC" else timezone.utc
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(
                f"session_start (version {event.version}): unknown timezone "
                f"{event.timezone!r}; use an IANA name such as Europe/Paris"
            ) from exc
        anchor = anchor.replace(tzinfo=zone)
    return anchor


__all__ = [
    "STATE_FIELDS",
    "ConversationState",
    "ResultState",
    "SlotState",
    "TranscriptEntry",
]
