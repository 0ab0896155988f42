"""The Director's verdict schema, per checkpoint (SPEC §7).

The Director is asked once per user turn, through a forced tool call (``record_verdict``)
whose arguments follow ``verdict_schema``. The schema is per checkpoint (its own slots, the
slots awaiting confirmation and those its rules require; enum values, string ``maxLength``; the
allowed advance targets and interrupt ids as enums), which keeps small models inside the
lines. It is built once per (checkpoint, awaiting slots) and cached per playbook.
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


def _value_schema(spec: SlotSpec) -> dict[str, Any]:
    """The JSON Schema of one slot's value as the Director must write it (ISO for dates)."""
    kind = spec.type
    if kind == "enum" and spec.values:
        return {"enum": list(spec.values)}
    if kind == "int":
        return {"type": "integer"}
    if kind == "float":
        return {"type": "number"}
    if kind == "bool":
        return {"type": "boolean"}
    if kind == "date":
        return {"type": "string", "format": "date", "pattern": r"^\d{4}-\d{2}-\d{2}$"}
    if kind == "time":
        return {"type": "string", "pattern": r"^([01]\d|2[0-3]):[0-5]\d$"}
    if kind == "datetime":
        return {"type": "string", "format": "date-time", "maxLength": 40}
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


def schema_slot_keys(playbook: Playbook, checkpoint: Checkpoint,
                      awaiting: Iterable[str]) -> list[str]:
    """Own slots, then slots the llm rules require, then slots awaiting confirmation.

    Authoritative and call-start slots are left out: the Director may not write them.
    """
    keys: dict[str, None] = dict.fromkeys(checkpoint.slots)
    for rule in checkpoint.advance_when:
        keys.update(dict.fromkeys(rule.requires))
    keys.update(dict.fromkeys(sorted(awaiting)))
    out = []
    for key in keys:
        spec = director_slot_spec(playbook, checkpoint, key)
        if spec is None or spec.authoritative or key in playbook.call_start:
            continue
        out.append(key)
    return out


def awaiting_confirmation(state: Any) -> frozenset[str]:
    """Slots whose value is provisional: they wait for the caller to affirm a read-back."""
    return frozenset(k for k, s in state.slots.items() if s.status == "provisional")


def llm_advance_targets(checkpoint: Checkpoint) -> list[str]:
    """The targets the Director may name in ``advance`` (document order, no duplicates)."""
    return list(dict.fromkeys(r.to for r in checkpoint.advance_when if r.judge == "llm"))


def llm_interrupt_ids(playbook: Playbook) -> list[str]:
    """The interrupts the Director may name in ``interrupt``."""
    return [i.id for i in playbook.interrupts if i.judge == "llm"]


def _build_schema(playbook: Playbook, checkpoint: Checkpoint,
                  awaiting: frozenset[str]) -> dict[str, Any]:
    keys = schema_slot_keys(playbook, checkpoint, awaiting)
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

    Cached per (checkpoint, slots awaiting confirmation); the returned dict is shared, so
    callers must not mutate it.
    """
    awaiting = awaiting_confirmation(state)
    cache = _cache_for(playbook)
    key = ("schema", state.checkpoint, awaiting)
    schema = cache.get(key)
    if schema is None:
        schema = _build_schema(playbook, current_checkpoint(state, playbook), awaiting)
        cache[key] = schema
    return schema


__all__ = [
    "NOTE_MAX",
    "STRING_MAX",
    "awaiting_confirmation",
    "current_checkpoint",
    "director_slot_spec",
    "llm_advance_targets",
    "llm_interrupt_ids",
    "schema_slot_keys",
    "verdict_schema",
]
