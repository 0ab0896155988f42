"""Parsing and applying a Director verdict (SPEC §7).

``parse_verdict`` turns whatever the model returned (tool arguments, a JSON string, a fenced
block, prose around one JSON object) into a dict with every field present; it raises
``VerdictError`` only when there is no JSON object at all, so the runtime can retry once with
the error. Field *types* are judged by ``apply_verdict``, which drops each bad field with its
own event and applies the rest.

``apply_verdict`` applies field by field in SPEC §7's order: ``deny``, ``slots``, ``confirm``,
``interrupt`` (wins over ``advance``), ``advance`` (its ``requires`` checked after the
confirmations), ``note``; then the spoken-goodbye backstop. It emits events through the
runtime's ``emit`` (which appends and applies at once, so each step sees the previous one's
effect) and ends with one ``Verdict`` event holding the verdict as applied. Quiescence, exit
lines, pipelines and terminal handling are the runtime's, after this returns.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..format import lookups
from ..format.playbook import Checkpoint, Playbook, SlotSpec
from ..log import events as ev
from ..log.slots import _READ_BACK_KINDS, plan_confirm, plan_deny, plan_write, requires_status
from ..values.coerce import ValueContext, ValueRefused, coerce
from ..values.evidence import (
    CallerWords,
    clock_said,
    in_callers_words,
    placeholder_reason,
    span_said,
)
from .goodbye import is_meta_instruction, is_spoken_goodbye
from .verdict_parse import VerdictError, VerdictTooLarge, parse_verdict, parse_verdict_counted

FIELDS: tuple[str, ...] = ("slots", "spans", "confirm", "deny", "advance", "interrupt", "note")
NOTE_MAX = 200
# What a span miss does for a slot whose ``anchor`` is ``inherit`` (SPEC §7), by type; measured
# with bench/director_quality.py (inventions stopped against correct values lost, see
# BENCHMARKS.md). Text, phones, emails, dates and times can be traced to the caller's words, so
# a miss is refused; a number may be said in words the check cannot read ("a dozen"), so it is
# only logged; an enum value is the model's mapping of the caller's words ("routine check-up"
# -> checkup), so there is nothing to find and the check is off.
DEFAULT_ANCHOR: dict[str, str] = {
    "str": "enforce", "phone": "enforce", "email": "enforce", "date": "enforce",
    "time": "enforce", "datetime": "enforce", "int": "shadow", "float": "shadow",
    "enum": "off", "bool": "off", "array": "off", "object": "off",
}
# Resolvable types: the Director may send the caller's words; the engine resolves them.
RESOLVED_TYPES = frozenset({"date", "time", "datetime"})
# A verdict naming any of these is not a missed goodbye: the spoken-goodbye backstop stays off.
BACKSTOP_BLOCKERS: tuple[str, ...] = ("advance", "interrupt", "slots", "confirm", "deny")

Emit = Callable[[ev.Event], Any]


@dataclass
class AppliedVerdict:
    """What a verdict changed: the checkpoint it moved to, the interrupt taken, slots written."""

    advanced_to: str | None = None
    interrupted: str | None = None
    wrote: set[str] = field(default_factory=set)
    verdict: dict[str, Any] = field(default_factory=dict)
    events: list[ev.Event] = field(default_factory=list)


# --- applying ------------------------------------------------------------------------------


class _Application:
    """One verdict being applied: collects emitted events and the verdict as applied."""

    def __init__(self, state: Any, playbook: Playbook, emit: Emit) -> None:
        self.state = state
        self.playbook = playbook
        self._emit = emit
        self.events: list[ev.Event] = []
        self.result = AppliedVerdict()

    def emit(self, event: ev.Event) -> None:
        out = self._emit(event)
        self.events.append(out if isinstance(out, ev.Event) else event)
        if isinstance(event, ev.SlotWrite):
            self.result.wrote.add(event.key)

    def emit_all(self, events: Iterable[ev.Event]) -> list[ev.Event]:
        emitted = list(events)
        for event in emitted:
            self.emit(event)
        return emitted

    def degraded(self, detail: str) -> None:
        self.emit(ev.Degraded(component="director", detail=detail))

    @property
    def checkpoint(self) -> Checkpoint:
        return lookups.checkpoints(self.playbook)[self.state.checkpoint]

    def slot_spec(self, key: str) -> SlotSpec | None:
        spec = self.checkpoint.slots.get(key)
        return spec if spec is not None else lookups.slot_spec(self.playbook, key)


def _key_list(app: _Application, verdict: dict[str, Any], name: str) -> list[str]:
    """A confirm/deny list: must be a list of known slot keys; bad entries dropped one by one."""
    value = verdict.get(name)
    if not isinstance(value, (list, tuple)):
        app.degraded(f"bad_field:{name}")
        return []
    keys: list[str] = []
    for item in value:
        if not isinstance(item, str):
            app.degraded(f"bad_field:{name}")
        elif app.slot_spec(item) is None:
            app.degraded(f"unknown_slot:{item}")
        elif item not in keys:
            keys.append(item)
    return keys


def _optional_str(app: _Application, verdict: dict[str, Any], name: str) -> str | None:
    value = verdict.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        app.degraded(f"bad_field:{name}")
        return None
    return value.strip() or None


# Catch-all enum members: a model picks them on turns that name no choice at all ("other" on
# "Friday, please"), so unlike a mapped choice they must have been said.
CATCH_ALL = frozenset({"other", "others", "unknown", "none", "n/a", "not_sure", "unsure",
                       "misc", "general", "unspecified"})


def anchor_mode(spec: SlotSpec, value: Any = None) -> str:
    """The slot's ``anchor``, with ``inherit`` resolved to the engine's default for its type
    (a catch-all enum value such as "other" is enforced)."""
    if spec.anchor != "inherit":
        return spec.anchor
    if spec.type == "enum" and isinstance(value, str) and value.strip().casefold() in CATCH_ALL:
        return "enforce"
    return DEFAULT_ANCHOR.get(spec.type, "off")


def callers_words(state: Any, user_text: str, user_version: int | None) -> CallerWords:
    """The caller's turns in the Director's window (its last 12 entries), ending at this turn."""
    turns: list[str] = []
    entries = 0
    seen_current = False
    for entry in reversed(state.transcript):
        if user_version is not None and entry.version > user_version:
            continue
        if getattr(entry, "superseded", False):
            continue
        entries += 1
        if entry.role == "user":
            turns.append(entry.text)
            seen_current = seen_current or entry.text == user_text
        if entries >= 12:
            break
    if not seen_current and user_text:
        turns.append(user_text)
    return CallerWords(turns)


def _evidence_ok(key: str, spec: SlotSpec, raw: Any, value: Any, span: Any,
                 heard: CallerWords, value_ctx: ValueContext, user_text: str) -> bool:
    """Whether the value (or its span) is in the caller's words (SPEC §7 ``spans``).

    A date or time sent in ISO form can only be traced through its span: the span must have
    been said and resolve to the same value (a model that works out "Thursday" wrongly, or
    fills today's date, fails here).
    """
    text_span = span if isinstance(span, str) and span.strip() else None
    if spec.type in RESOLVED_TYPES:
        if isinstance(raw, str) and in_callers_words(spec.type, raw, heard):
            return True
        if spec.type == "time" and clock_said(value, heard):
            return True
        if text_span is not None and span_said(text_span, heard) and _resolves_to(
                key, spec, text_span, value, value_ctx):
            return True
        # No span, or one that does not hold: look for words of the caller's line that
        # resolve to this value ("at seven pm" for 19:00); today's date, or a day worked out
        # wrongly, has none
        today = value_ctx.local_now.date().isoformat()
        return any(_resolves_to(key, spec, phrase, value, value_ctx)
                   for phrase in _phrases(user_text, value_ctx.language)
                   if not str(value).startswith(today) or _names_today(phrase))
    if in_callers_words(spec.type, value if spec.type == "email" else raw, heard, span=text_span):
        return True
    if spec.type == "enum":  # a catch-all: "something else" names "other"
        return bool({"else", "another"} & heard.words)
    # a value the coercion reshaped (an int from "four", a phone from words) may still be
    # traced through its span
    return text_span is not None and spec.type in ("int", "float") and span_said(text_span, heard)


PHRASE_WORDS = 5  # the longest run of a caller's words tried as a date or time


def _resolves_to(key: str, spec: SlotSpec, phrase: str, value: Any, value_ctx: ValueContext) -> bool:
    try:
        return bool(coerce(key, spec, phrase, value_ctx) == value)
    except ValueRefused:
        return False


# dateparser reads a bare part of the day ("in the afternoon") as today; a model fills today's
# date from such words, so a value on today needs words that name today.
_TODAY_WORDS = frozenset({"today", "tonight", "now", "this", "heute", "hoy", "aujourd'hui",
                          "aujourd", "oggi", "hoje", "vandaag"})


def _names_today(phrase: str) -> bool:
    words = {w.strip(",.;:!?\"").casefold() for w in phrase.split()}
    return bool(words & _TODAY_WORDS) or any(ch.isdigit() for ch in phrase)


def _phrases(text: str, language: str = "en") -> list[str]:
    """The caller's line, then each run of up to PHRASE_WORDS of its words (longest first).

    A run must hold a digit or a word of three letters or more: dateparser reads a lone "a"
    as today, which would let a model's made-up "today" pass as said.
    """
    words = [w.strip(",.;:!?\"'") for w in text.split()]
    words = [w for w in words if w]
    runs = [" ".join(text.split())]
    for size in range(min(PHRASE_WORDS, len(words)), 0, -1):
        runs.extend(" ".join(words[i:i + size]) for i in range(len(words) - size + 1))
    # a bare year ("2027") is read as today's day in that year: no evidence for a day
    phrases = [run for run in dict.fromkeys(runs)
               if not (run.isdigit() and len(run) >= 3)
               and (any(ch.isdigit() for ch in run) or any(len(w) >= 3 for w in run.split()))
               and (_DATEISH.search(run) or not language.lower().startswith("en"))]
    # Each phrase is a date-parser call (~1 ms) on the event loop, which every call on the
    # worker shares: a long line must not cost a hundred of them.
    return phrases[:MAX_PHRASES]


# In English a run can only name a day or a time with one of these; the others are not worth
# parsing (other languages are only capped).
_DATEISH = re.compile(  # word starts: "mon" covers monday and month, "four" fourth
    r"\d|\b(?:to|yes|now|next|this|last|week|mon|tue|wed|thu|fri|sat|sun|morn|after|even|"
    r"night|noon|mid|o'?clock|[ap]\.?m\b|half|quarter|past|jan|feb|mar|apr|may|jun|jul|aug|"
    r"sep|oct|nov|dec|one|two|three|four|fif|six|seven|eigh|nin|ten|eleven|twel|twen|thirt|"
    r"first|second|third)", re.I)
MAX_PHRASES = 24  # date-parser calls at most per unanchored date/time (longest runs first)


def _refuse_unanchored(app: _Application, key: str, spec: SlotSpec, raw: Any, value: Any,
                       span: Any, heard: CallerWords, value_ctx: ValueContext,
                       user_text: str) -> bool:
    """Apply the slot's ``anchor`` to a span miss; True when the value must not be written."""
    mode = anchor_mode(spec, value)
    if mode == "off" or spec.resolve_from is not None or not heard:
        return False
    known = app.state.slots.get(key)
    if known is not None and known.value == value:
        return False  # the value it already holds: nothing is written, nothing to prove
    if _evidence_ok(key, spec, raw, value, span, heard, value_ctx, user_text):
        return False
    if mode == "enforce":
        app.emit(ev.SlotRefused(
            key=key, value=raw, by="director",
            message=f"{key}: that is not in the caller's words; ask the caller for it"))
        return True
    app.degraded(f"anchor_miss:{key}")  # shadow: evidence, not a gate
    return False


def _refuse_placeholder(app: _Application, key: str, spec: SlotSpec, raw: Any, value: Any,
                        heard: CallerWords) -> bool:
    """Refuse "unknown", "N/A", "John Doe" and the like for a ``str`` slot (SPEC §7)."""
    if spec.type != "str" or not isinstance(value, str):
        return False
    reason = placeholder_reason(value, heard)
    if reason is None:
        return False
    app.emit(ev.SlotRefused(key=key, value=raw, by="director", message=f"{key}: {reason}"))
    return True


def _resolution(spec: SlotSpec, raw: Any, value: Any) -> dict[str, Any] | None:
    """What the engine resolved a date/time from (logged in the Verdict), or None for ISO."""
    if spec.type not in RESOLVED_TYPES or not isinstance(raw, str):
        return None
    if " ".join(raw.split()) == value:
        return None
    return {"from": raw, "to": value}


def _apply_slots(app: _Application, verdict: dict[str, Any], value_ctx: ValueContext,
                 user_text: str, user_version: int | None = None,
                 ) -> tuple[dict[str, Any], dict[str, str], set[str], dict[str, Any]]:
    """Coerce, check and write each slot value.

    Returns (applied slots, applied spans, changed keys, resolutions: what each date or time
    given in words was resolved to).
    """
    slots = verdict.get("slots")
    spans = verdict.get("spans")
    if not isinstance(slots, dict):
        app.degraded("bad_field:slots")
        slots = {}
    if not isinstance(spans, dict):
        app.degraded("bad_field:spans")
        spans = {}
    heard = callers_words(app.state, user_text, user_version)
    applied: dict[str, Any] = {}
    applied_spans: dict[str, str] = {}
    changed: set[str] = set()
    resolved: dict[str, Any] = {}
    for key, raw in slots.items():
        spec = app.slot_spec(key)
        if spec is None:
            app.degraded(f"unknown_slot:{key}")
            continue
        if raw is None:
            continue  # "not stated": nothing to write, nothing to refuse
        try:
            value = coerce(key, spec, raw, value_ctx)
        except ValueRefused as refused:
            app.emit(ev.SlotRefused(key=key, value=raw, by="director", message=refused.message))
            continue
        span = spans.get(key)
        if span is not None and not isinstance(span, str):
            app.degraded(f"bad_field:spans.{key}")
            span = None
        if _refuse_placeholder(app, key, spec, raw, value, heard):
            continue
        if _refuse_unanchored(app, key, spec, raw, value, span, heard, value_ctx, user_text):
            continue
        emitted = app.emit_all(plan_write(app.state, app.playbook, key, value, by="director"))
        if any(isinstance(e, ev.SlotWrite) and e.key == key for e in emitted):
            changed.add(key)
        if not any(isinstance(e, ev.SlotRefused) and e.key == key for e in emitted):
            applied[key] = value
            if isinstance(span, str):
                applied_spans[key] = span
            how = _resolution(spec, raw, value)
            if how is not None:
                resolved[key] = how
    return applied, applied_spans, changed, resolved


# Types whose read-back is spoken in words that cannot be matched to the stored form
# ("Friday the 4th" for 2026-12-04): for these the read-back's version alone counts.
_SPOKEN_DIFFERENTLY = frozenset({"date", "time", "datetime", "enum", "bool", "array", "object"})


def deny_refusal(state: Any, key: str, spec: SlotSpec | None, user_version: int,
                 replaced: bool) -> str | None:
    """Why a ``deny`` of ``key`` must be dropped, or None when it may clear the value (SPEC §4.3).

    A deny clears a value only when the caller's turn answers a fully heard read-back of
    that value (spoken from a state holding it, and naming it where its spoken form can be
    matched: "oh seven nine one one..." names +447911...), or when the same verdict gives
    the replacement. A "no" to an unrelated question never wipes a known value.
    """
    if replaced:
        return None
    slot = state.slots.get(key)
    if slot is None or slot.value is None:
        return "not_filled"
    said = state.read_back_target(user_version)
    if said is None or said.kind not in _READ_BACK_KINDS or not said.fully_heard:
        return "deny_without_read_back"
    spoke_from = said.spoke_from_version if said.spoke_from_version is not None else said.version
    if spoke_from < slot.version:
        return "deny_without_read_back"
    kind = spec.type if spec is not None else "str"
    if kind not in _SPOKEN_DIFFERENTLY:
        heard = said.heard_text if getattr(said, "heard_text", None) is not None else said.text
        if not in_callers_words(kind, slot.value, CallerWords([heard])):
            return "deny_without_read_back"
    return None


def _apply_deny(app: _Application, verdict: dict[str, Any], user_version: int) -> list[str]:
    """Clear each denied slot that was read back (or is replaced in this verdict); drop the rest."""
    deny = _key_list(app, verdict, "deny")
    slots = verdict.get("slots")
    replacing = {k for k, v in slots.items() if v is not None} if isinstance(slots, dict) else set()
    applied: list[str] = []
    for key in deny:
        reason = deny_refusal(app.state, key, app.slot_spec(key), user_version,
                              key in replacing)
        if reason == "not_filled":
            continue  # nothing to clear: a no-op, as before
        if reason is not None:
            app.degraded(f"{reason}:{key}")
            continue
        app.emit_all(plan_deny(app.state, key))
        applied.append(key)
    return applied


def _apply_interrupt(app: _Application, interrupt_id: str, user_text: str) -> bool:
    spec = app.playbook.interrupt(interrupt_id)
    if spec is None or spec.judge != "llm":
        app.degraded(f"unknown_interrupt:{interrupt_id}")
        return False
    if spec.kind == "goodbye" and is_meta_instruction(user_text):
        # The caller told the machine to end; that is not the caller leaving (SPEC §6).
        app.degraded(f"meta_instruction:{interrupt_id}")
        return False
    if spec.to == app.state.checkpoint:
        app.degraded(f"interrupt_to_current:{interrupt_id}")
        return False
    app.emit(ev.Advance(from_=app.state.checkpoint, to=spec.to,
                        rule_id=f"interrupt:{interrupt_id}", by="interrupt"))
    app.result.interrupted = interrupt_id
    app.result.advanced_to = spec.to
    return True


def _cannot_move_on(missing: list[str], unconfirmed: list[str]) -> str:
    parts = []
    if missing:
        parts.append(f"still need {', '.join(missing)}")
    if unconfirmed:
        parts.append(f"still need the caller to confirm {', '.join(unconfirmed)} (read it back)")
    return "Cannot move on yet: " + "; ".join(parts) + "."


def _apply_advance(app: _Application, target: str) -> str:
    """Advance through the first llm rule to ``target`` whose requires hold; else steer.

    Returns ``"advanced"``, ``"blocked"`` (requires unmet: a steering note) or ``"unknown"``.
    """
    ref = app.state.checkpoint
    rules = [r for r in app.checkpoint.advance_when if r.judge == "llm" and r.to == target]
    if not rules:
        app.degraded(f"unknown_advance_target:{target}")
        return "unknown"
    blocked: tuple[list[str], list[str]] | None = None
    for rule in rules:
        missing, unconfirmed = requires_status(app.state, app.playbook, rule, ref)
        if missing or unconfirmed:
            blocked = blocked or (list(missing), list(unconfirmed))
            continue
        for key, value in rule.set_.items():
            app.emit_all(plan_write(app.state, app.playbook, key, value, by="rule"))
        app.emit(ev.Advance(from_=ref, to=target, rule_id=rule.id or target, by="director"))
        app.result.advanced_to = target
        return "advanced"
    assert blocked is not None
    app.emit(ev.SteeringNote(text=_cannot_move_on(*blocked), kind="steer"))
    return "blocked"


def _goodbye_backstop(app: _Application, user_text: str, goodbye_words: Iterable[str]) -> None:
    """A goodbye the Director missed still routes to the goodbye interrupt (SPEC §6)."""
    spec = next((i for i in app.playbook.interrupts if i.kind == "goodbye"), None)
    if spec is None or spec.to == app.state.checkpoint:
        return
    if not is_spoken_goodbye(user_text, goodbye_words):
        return
    app.emit(ev.Advance(from_=app.state.checkpoint, to=spec.to,
                        rule_id=f"interrupt:{spec.id}", by="interrupt"))
    app.result.interrupted = spec.id
    app.result.advanced_to = spec.to


def apply_verdict(
    verdict: dict[str, Any],
    *,
    state: Any,
    playbook: Playbook,
    value_ctx: ValueContext,
    user_text: str,
    user_version: int,
    emit: Emit,
    goodbye_words: Iterable[str] | None = None,
    latency_ms: float = 0.0,
    attempts: int = 1,
) -> AppliedVerdict:
    """Apply a parsed verdict field by field (SPEC §7); each bad field is dropped with its event.

    ``emit`` appends an event to the log and applies it to ``state`` at once. Ends with one
    ``Verdict`` event (the verdict as applied: dropped fields removed; ``latency_ms`` and
    ``attempts`` come from the runtime, which timed the model call).
    """
    app = _Application(state, playbook, emit)
    words = playbook.policies.goodbye_words if goodbye_words is None else goodbye_words
    for name in verdict:
        if name not in FIELDS:
            app.degraded(f"unknown_field:{name}")
    applied: dict[str, Any] = {}

    deny = _apply_deny(app, verdict, user_version)
    if deny:
        applied["deny"] = deny

    slots, spans, changed, resolved = _apply_slots(app, verdict, value_ctx, user_text,
                                                   user_version)
    if slots:
        applied["slots"] = slots
    if spans:
        applied["spans"] = spans
    if resolved:
        applied["resolved"] = resolved  # logged: what each date/time was resolved from

    confirm = _key_list(app, verdict, "confirm")
    confirmed: list[str] = []
    for key in confirm:
        # plan_confirm refuses (one degraded event) a value this same verdict changed, an
        # unheard or stale read-back, or an empty slot (SPEC §4.3).
        emitted = app.emit_all(plan_confirm(state, playbook, key, user_version=user_version,
                                            changed_in_verdict=changed))
        if not any(isinstance(e, ev.Degraded) for e in emitted):
            confirmed.append(key)
    if confirmed:
        applied["confirm"] = confirmed

    interrupt_id = _optional_str(app, verdict, "interrupt")
    target = _optional_str(app, verdict, "advance")
    if interrupt_id is not None and _apply_interrupt(app, interrupt_id, user_text):
        applied["interrupt"] = interrupt_id
    # A Director-chosen interrupt wins: the advance stays in the record, unapplied. A blocked
    # advance stays too (its steering note says why); an unknown target is dropped.
    if target is not None and (
        app.result.interrupted is not None or _apply_advance(app, target) != "unknown"
    ):
        applied["advance"] = target

    note = _optional_str(app, verdict, "note")
    if note is not None:
        text = " ".join(note.split())[:NOTE_MAX]
        app.emit(ev.SteeringNote(text=text, kind="steer"))
        applied["note"] = text

    # SPEC §6: the backstop is for a goodbye the Director *missed*, so it applies only to a
    # verdict that asked for nothing: a refused confirm or a blocked advance is still the
    # Director's reading that the caller is going on (booking), not leaving.
    if app.result.advanced_to is None and not any(
        verdict.get(name) for name in BACKSTOP_BLOCKERS
    ):
        _goodbye_backstop(app, user_text, words)

    app.result.verdict = applied
    app.emit(ev.Verdict(verdict=applied, latency_ms=latency_ms, attempts=attempts,
                        user_version=user_version))
    return app.result


__all__ = [
    "DEFAULT_ANCHOR",
    "FIELDS",
    "AppliedVerdict",
    "VerdictError",
    "VerdictTooLarge",
    "anchor_mode",
    "apply_verdict",
    "callers_words",
    "deny_refusal",
    "parse_verdict",
    "parse_verdict_counted",
]
