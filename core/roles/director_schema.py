"""The Director's verdict schema, per checkpoint (SPEC §7).

The Director is asked once per user turn, through a forced tool call (``record_verdict``)
whose arguments follow ``verdict_schema``. The schema is per checkpoint (its own slots, the
slots awaiting confirmation that its rules require; enum values, string ``maxLength``; the
allowed advance targets and interrupt ids as enums), which keeps small models inside the
lines: a slot of another checkpoint is never offered, so it cannot be filled by accident.
Dates and times are text: the caller's words or ISO, resolved by the engine (SPEC §4.1). It
is built once per (checkpoint, filled slots, awaiting slots) and cached per playbook.
``director.py`` builds the prompt around it and re-exports these names.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..format import lookups
from ..format.lookups import cache_for as _cache_for
from ..format.playbook import Checkpoint, Playbook, SlotSpec

STRING_MAX = 200
NOTE_MAX = 200

# Per-playbook caches (``_cache_for``, from lookups): the playbook is shared by every call,
# so a turn only looks up.


def current_checkpoint(state: Any, playbook: Playbook) -> Checkpoint:
    """The state's checkpoint, or a clear error when the state is not inside this playbook."""
    ref = state.checkpoint
    checkpoint = lookups.checkpoints(playbook).get(ref) if ref is not None else None
    if checkpoint is None:
        raise ValueError(
            f"the conversation is at checkpoint {ref!r}, which this playbook does not have; "
            "start the session (its init advance) or resume it with the playbook it was logged with"
        )
    return checkpoint


WORDS_MAX = 40  # a date or time in the caller's words ("the Friday after next at half nine")


def _value_schema(spec: SlotSpec) -> dict[str, Any]:
    """The JSON Schema of one slot's value as the Director must write it.

    Dates and times are the caller's words or ISO text: the engine resolves words against
    the call's clock, zone and region, so the model never does calendar arithmetic.
    """
    kind = spec.type
    if kind == "enum" and spec.values:
        return {"enum": list(spec.values)}
    if kind == "int":
        return {"type": "integer"}
    if kind == "float":
        return {"type": "number"}
    if kind == "bool":
        return {"type": "boolean"}
    if kind in ("date", "time", "datetime"):
        return {"type": "string", "minLength": 1, "maxLength": WORDS_MAX}
    if kind == "phone":
        return {"type": "string", "maxLength": 32}
    if kind == "email":
        return {"type": "string", "maxLength": 254}
    if kind == "array":
        return {"type": "array", "maxItems": 20}
    if kind == "object":
        return {"type": "object"}
    return {"type": "string", "maxLength": STRING_MAX}


def director_slot_spec(playbook: Playbook, checkpoint: Checkpoint, key: str) -> SlotSpec | None:
    """The spec the Director writes ``key`` against: the current checkpoint's, else the first."""
    spec = checkpoint.slots.get(key)
    return spec if spec is not None else lookups.slot_spec(playbook, key)


def schema_slot_keys(playbook: Playbook, checkpoint: Checkpoint, awaiting: Iterable[str],
                     filled: Iterable[str] = ()) -> list[str]:
    """The slots the Director may write here: the checkpoint's missing slots, then its filled
    ones (so a correction always has a field), then slots its llm rules require that await
    confirmation (a read-back here may be corrected). Never another checkpoint's slot besides.

    Authoritative and call-start slots are left out: the Director may not write them.
    """
    have = set(filled)
    own = list(checkpoint.slots)
    keys: dict[str, None] = dict.fromkeys(k for k in own if k not in have)
    keys.update(dict.fromkeys(k for k in own if k in have))
    waiting = set(awaiting)
    for rule in checkpoint.advance_when:
        keys.update(dict.fromkeys(k for k in rule.requires if k in waiting))
    out = []
    for key in keys:
        spec = director_slot_spec(playbook, checkpoint, key)
        if spec is None or spec.authoritative or key in playbook.call_start:
            continue
        out.append(key)
    return out


def filled_slots(state: Any, checkpoint: Checkpoint) -> frozenset[str]:
    """The checkpoint's own slots that hold a value."""
    slots = state.slots
    return frozenset(k for k in checkpoint.slots
                     if k in slots and slots[k].value is not None)


def awaiting_confirmation(state: Any) -> frozenset[str]:
    """Slots whose value is provisional: they wait for the caller to affirm a read-back."""
    return frozenset(k for k, s in state.slots.items() if s.status == "provisional")


def llm_advance_targets(checkpoint: Checkpoint) -> list[str]:
    """The targets the Director may name in ``advance`` (document order, no duplicates)."""
    return list(dict.fromkeys(r.to for r in checkpoint.advance_when if r.judge == "llm"))


def llm_interrupt_ids(playbook: Playbook) -> list[str]:
    """The interrupts the Director may name in ``interrupt``."""
    return [i.id for i in playbook.interrupts if i.judge == "llm"]


def _build_schema(playbook: Playbook, checkpoint: Checkpoint, awaiting: frozenset[str],
                  filled: frozenset[str]) -> dict[str, Any]:
    keys = schema_slot_keys(playbook, checkpoint, awaiting, filled)
    slot_props = {}
    for key in keys:
        spec = director_slot_spec(playbook, checkpoint, key)
        assert spec is not None  # filtered by schema_slot_keys
        slot_props[key] = _value_schema(spec)
    confirmable = sorted(k for k in awaiting if k in slot_props)
    key_list: dict[str, Any] = (
        {"type": "array", "items": {"enum": confirmable}, "maxItems": len(confirmable)}
        if confirmable else {"type": "array", "maxItems": 0}
    )
    targets = llm_advance_targets(checkpoint)
    interrupts = llm_interrupt_ids(playbook)
    return {
        "type": "object",
        "properties": {
            "slots": {"type": "object", "properties": slot_props, "additionalProperties": False},
            "spans": {
                "type": "object",
                "properties": {k: {"type": "string", "maxLength": STRING_MAX} for k in keys},
                "additionalProperties": False,
            },
            "confirm": key_list,
            "deny": dict(key_list),
            "advance": {"enum": [*targets, None]},
            "interrupt": {"enum": [*interrupts, None]},
            "note": {"type": ["string", "null"], "maxLength": NOTE_MAX},
        },
        "additionalProperties": False,
    }


def verdict_schema(state: Any, playbook: Playbook) -> dict[str, Any]:
    """The JSON Schema of ``record_verdict``'s arguments at the current checkpoint.

    Cached per (checkpoint, filled slots, slots awaiting confirmation); the returned dict is
    shared, so callers must not mutate it.
    """
    checkpoint = current_checkpoint(state, playbook)
    awaiting = awaiting_confirmation(state)
    filled = filled_slots(state, checkpoint)
    cache = _cache_for(playbook)
    key = ("schema", state.checkpoint, filled, awaiting)
    schema = cache.get(key)
    if schema is None:
        schema = _build_schema(playbook, checkpoint, awaiting, filled)
        cache[key] = schema
    return schema


__all__ = [
    "NOTE_MAX",
    "STRING_MAX",
    "awaiting_confirmation",
    "current_checkpoint",
    "director_slot_spec",
    "filled_slots",
    "llm_advance_targets",
    "llm_interrupt_ids",
    "schema_slot_keys",
    "verdict_schema",
]
