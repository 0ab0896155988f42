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

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..format import lookups
from ..format.playbook import Checkpoint, Playbook, SlotSpec
from ..log import events as ev
from ..log.slots import plan_confirm, plan_deny, plan_write, requires_status
from ..values.coerce import ValueContext, ValueRefused, coerce
from .goodbye import is_meta_instruction, is_spoken_goodbye
from .verdict_parse import VerdictError, VerdictTooLarge, parse_verdict, parse_verdict_counted

FIELDS: tuple[str, ...] = ("slots", "spans", "confirm", "deny", "advance", "interrupt", "note")
NOTE_MAX = 200
# A verdict naming any of these is not a missed goodbye: the spoken-goodbye backstop stays off.
BACKSTOP_BLOCKERS: tuple[str, ...] = ("advance", "interrupt", "slots", "confirm", "deny")
_QUOTES = str.maketrans({"’": "'", "‘": "'", "“": '"', "”": '"'})

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


def _normal_words(text: str) -> str:
    return " ".join(text.translate(_QUOTES).casefold().split())


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


def _apply_slots(app: _Application, verdict: dict[str, Any], value_ctx: ValueContext,
                 user_text: str) -> tuple[dict[str, Any], dict[str, str], set[str]]:
    """Coerce and write each slot value; returns (applied slots, applied spans, changed keys)."""
    slots = verdict.get("slots")
    spans = verdict.get("spans")
    if not isinstance(slots, dict):
        app.degraded("bad_field:slots")
        slots = {}
    if not isinstance(spans, dict):
        app.degraded("bad_field:spans")
        spans = {}
    heard = _normal_words(user_text)
    applied: dict[str, Any] = {}
    applied_spans: dict[str, str] = {}
    changed: set[str] = set()
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
        if span is not None:
            if not isinstance(span, str):
                app.degraded(f"bad_field:spans.{key}")
            elif heard and _normal_words(span) not in heard:
                # Evidence, not a gate: a value without its words in the turn still lands.
                app.degraded(f"anchor_miss:{key}")
        emitted = app.emit_all(plan_write(app.state, app.playbook, key, value, by="director"))
        if any(isinstance(e, ev.SlotWrite) and e.key == key for e in emitted):
            changed.add(key)
        if not any(isinstance(e, ev.SlotRefused) and e.key == key for e in emitted):
            applied[key] = value
            if isinstance(span, str):
                applied_spans[key] = span
    return applied, applied_spans, changed


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

    deny = _key_list(app, verdict, "deny")
    for key in deny:
        app.emit_all(plan_deny(state, key))
    if deny:
        applied["deny"] = deny

    slots, spans, changed = _apply_slots(app, verdict, value_ctx, user_text)
    if slots:
        applied["slots"] = slots
    if spans:
        applied["spans"] = spans

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
    "FIELDS",
    "AppliedVerdict",
    "VerdictError",
    "VerdictTooLarge",
    "apply_verdict",
    "parse_verdict",
    "parse_verdict_counted",
]
