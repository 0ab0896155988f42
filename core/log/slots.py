"""The confirmation rules of SPEC §4.2-4.3, as pure planners that return events.

Nothing here appends or mutates: each function reads the state and returns the unstamped
events that carry out the rule (the runtime or the Director emits them in order). Keeping the
rules out of the fold means the log records every decision, and the fold stays a dumb replay.

Status of a write (§4.2): ``confirmed`` for authoritative origins (tool, rule ``set``,
call-start, a caller's affirmed read-back, policy); for the Director, ``provisional`` when the
slot needs confirmation (``confirm: true`` or an effective hard gate), else ``accepted``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from ..format import lookups
from . import events as ev

if TYPE_CHECKING:
    from ..format.playbook import AdvanceRule, Playbook
    from .state import ConversationState

AUTHORITATIVE_WRITERS: frozenset[str] = frozenset({"tool", "rule", "call_start", "caller", "policy"})
# A write of the same value never lowers the status it already has: a Director that restates
# a confirmed value must not re-open it (only ``withdraw`` does that, explicitly).
_RANK = {"provisional": 0, "accepted": 1, "confirmed": 2}
_READ_BACK_KINDS = frozenset({"talker", "verbatim", None})


def status_for(playbook: Playbook, key: str, by: str) -> ev.SlotStatus:
    """The status a write of ``key`` by ``by`` gets (SPEC §4.2)."""
    if by in AUTHORITATIVE_WRITERS:
        return "confirmed"
    if by == "director":
        return "provisional" if lookups.needs_confirmation(playbook, key) else "accepted"
    raise ValueError(
        f"unknown writer {by!r} for slot {key!r}; use one of director, caller, tool, rule, "
        "call_start, policy"
    )


def same_value(a: Any, b: Any) -> bool:
    """Equal as JSON values all the way down: ``4`` and ``4.0`` are the same number, but
    ``1`` and ``True`` or ``"4"`` and ``4`` differ (Python's ``==`` would merge the first)."""
    if type(a) is not type(b):
        numbers = (int, float)
        return (
            isinstance(a, numbers) and isinstance(b, numbers)
            and not isinstance(a, bool) and not isinstance(b, bool) and a == b
        )
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def plan_write(
    state: ConversationState, playbook: Playbook, key: str, value: Any, by: ev.WrittenBy
) -> list[ev.Event]:
    """Events that write ``value`` to ``key`` for writer ``by`` (value already coerced).

    Refuses a Director write of an authoritative or call-start slot; a ``None`` value clears
    the slot (a rule ``set`` with null); the identical value at the same or a stronger status
    is a no-op; a different value replaces the old one, and ``invalidates`` then clears the
    listed slots and results (only when there was an old value).
    """
    spec = lookups.slot_spec(playbook, key)
    if by == "director":
        if key in playbook.call_start or (spec is not None and spec.authoritative):
            return [ev.SlotRefused(
                key=key, value=value, by="director",
                message=f"{key}: this value is set by the system; do not ask the caller for it",
            )]
        if spec is None and key not in playbook.declared_slots():
            return [ev.SlotRefused(
                key=key, value=value, by="director",
                message=f"{key}: not a slot of this playbook; record only the listed slots",
            )]
    status = status_for(playbook, key, by)
    old = state.slots.get(key)
    if value is None:
        if old is None:
            return []
        reason = "cleared by rule" if by == "rule" else f"cleared by {by}"
        return [
            ev.SlotClear(key=key, reason=reason, by=by),
            *_invalidations(state, playbook, key, by),
        ]
    if old is not None and same_value(old.value, value) and _RANK[old.status] >= _RANK[status]:
        return []
    events: list[ev.Event] = [ev.SlotWrite(key=key, value=value, status=status, by=by)]
    if old is not None and old.value is not None and not same_value(old.value, value):
        events.extend(_invalidations(state, playbook, key, by))
    return events


def _invalidations(
    state: ConversationState, playbook: Playbook, key: str, by: str
) -> list[ev.Event]:
    """``slot_clear`` for each filled slot / stored result that ``key`` invalidates."""
    spec = lookups.slot_spec(playbook, key)
    if spec is None:
        return []
    out: list[ev.Event] = []
    for target in spec.invalidates:
        if target == key:
            continue
        if target.startswith("results."):
            present = target[len("results.") :] in state.results
        else:
            present = target in state.slots
        if present:
            out.append(ev.SlotClear(key=target, reason=f"invalidated by {key}", by=by))
    return out


def plan_confirm(
    state: ConversationState,
    playbook: Playbook,
    key: str,
    *,
    user_version: int,
    changed_in_verdict: Collection[str] = (),
) -> list[ev.Event]:
    """Events for a Director ``confirm`` of ``key`` on the caller's utterance at ``user_version``.

    Accepted (a ``slot_write`` of the same value, ``confirmed`` by ``caller``) only when:
    (a) the slot is filled and provisional; (b) the caller's turn answers a Talker segment or
    verbatim line (filler is passed over; a silence prompt or canned line does not count);
    (c) that utterance was fully heard; (d) it was spoken from a version at or after the
    slot's write; (e) the same verdict does not change the slot. Otherwise one ``degraded``
    event ``confirm_refused:<key>:<reason>``. Confirming an already accepted or confirmed
    value needs nothing and returns no event.
    """
    slot = state.slots.get(key)
    if slot is None or slot.value is None:
        return [_refused(key, "not_filled")]
    if slot.status != "provisional":
        return []
    if key in changed_in_verdict:
        return [_refused(key, "changed_in_same_verdict")]
    user = state.entry(user_version)
    if user is None or user.role != "user":
        return [_refused(key, f"no_user_utterance_at_{user_version}")]
    said = state.read_back_target(user_version)
    if said is None:
        return [_refused(key, "no_read_back_before_turn")]
    if said.kind not in _READ_BACK_KINDS:
        return [_refused(key, f"answers_{said.kind}")]
    if not said.fully_heard:
        return [_refused(key, "read_back_not_fully_heard")]
    spoke_from = said.spoke_from_version if said.spoke_from_version is not None else said.version
    if spoke_from < slot.version:
        return [_refused(key, "read_back_older_than_value")]
    return [ev.SlotWrite(key=key, value=slot.value, status="confirmed", by="caller")]


def _refused(key: str, reason: str) -> ev.Degraded:
    return ev.Degraded(component="director", detail=f"confirm_refused:{key}:{reason}")


def plan_deny(state: ConversationState, key: str) -> list[ev.Event]:
    """The caller said ``key``'s value is wrong: clear it (reason ``denied``) so it is asked again.

    Clearing is a change, so the slot's ``invalidates`` fire too (a later new value would be
    a first write and would not fire them).
    """
    if key not in state.slots:
        return []
    return [
        ev.SlotClear(key=key, reason="denied", by="director"),
        *_invalidations(state, state.playbook, key, "director"),
    ]


def plan_withdraw(
    state: ConversationState, playbook_or_key: Playbook | str, key: str | None = None
) -> list[ev.Event]:
    """Re-open a value: confirmed (or accepted) back to ``provisional``, written by ``policy``.

    Called as ``plan_withdraw(state, key)`` or ``plan_withdraw(state, playbook, key)``. An
    empty or already provisional slot needs nothing; an undeclared key is an error.
    """
    if key is None:
        if not isinstance(playbook_or_key, str):
            raise TypeError("plan_withdraw(state, key) or plan_withdraw(state, playbook, key)")
        key, playbook = playbook_or_key, state.playbook
    else:
        playbook = playbook_or_key  # type: ignore[assignment]
    if key not in playbook.declared_slots():
        known = ", ".join(sorted(playbook.declared_slots()))
        raise ValueError(f"cannot withdraw {key!r}: it is not a slot of this playbook ({known})")
    slot = state.slots.get(key)
    if slot is None or slot.status == "provisional":
        return []
    return [ev.SlotWrite(key=key, value=slot.value, status="provisional", by="policy")]


def requires_status(
    state: ConversationState,
    playbook: Playbook,
    rule: AdvanceRule | Sequence[str],
    checkpoint_ref: str | None = None,
) -> tuple[list[str], list[str]]:
    """``(missing, unconfirmed)`` for a rule's ``requires`` at ``checkpoint_ref`` (default: current).

    At a hard gate (the checkpoint's own gate) a required slot is met by an accepted or
    confirmed value, so a provisional one is ``unconfirmed``; at a soft gate any filled value
    meets it. Both lists keep the order of ``requires``; the rule is met when both are empty.
    """
    keys = rule if isinstance(rule, Sequence) and not isinstance(rule, str) else rule.requires  # type: ignore[union-attr]
    ref = checkpoint_ref if checkpoint_ref is not None else state.checkpoint
    cps = lookups.checkpoints(playbook)
    hard = ref is not None and ref in cps and cps[ref].gate == "hard"
    missing: list[str] = []
    unconfirmed: list[str] = []
    for key in keys:
        slot = state.slots.get(key)
        if slot is None or slot.value is None:
            missing.append(key)
        elif hard and slot.status == "provisional":
            unconfirmed.append(key)
    return missing, unconfirmed


def read_back_items(state: ConversationState, playbook: Playbook) -> list[str]:
    """Slots the Talker must "read back and confirm" at the current checkpoint (SPEC §4.3).

    The provisional slots that the checkpoint's rules require at a hard gate, or that its
    tools (its pipeline's steps and ``on_enter``) send in their url, headers or body; plus
    the slots among those, or required by any of its rules, that the caller denied (still
    needed). Rule ``requires`` come first in declared order, then tool slots in playbook
    declaration order. Tools compiled by the loader expose ``slot_refs``; an uncompiled
    playbook (built directly from the models) contributes no tool slots.
    """
    ref = state.checkpoint
    checkpoint = lookups.checkpoints(playbook).get(ref) if ref is not None else None
    if checkpoint is None:
        return []
    hard = checkpoint.gate == "hard"
    required: list[str] = []
    for rule in checkpoint.advance_when:
        required.extend(rule.requires)
    candidates = dict.fromkeys(required if hard else ())
    if checkpoint.pipeline is not None or checkpoint.on_enter:
        candidates.update(dict.fromkeys(_tool_slot_refs(playbook, checkpoint.pipeline,
                                                        checkpoint.on_enter)))
    items: list[str] = []
    for key in dict.fromkeys([*candidates, *required]):
        slot = state.slots.get(key)
        if slot is not None:
            if slot.status == "provisional" and key in candidates:
                items.append(key)
        elif key in state.denied:
            items.append(key)
    return items


def _tool_slot_refs(playbook: Playbook, pipeline_id: str | None, on_enter: list[str]) -> list[str]:
    tool_ids: list[str] = list(on_enter)
    if pipeline_id is not None:
        try:
            tool_ids.extend(step.tool for step in playbook.pipeline(pipeline_id).steps)
        except KeyError:
            raise ValueError(f"unknown pipeline {pipeline_id!r}: the playbook did not validate") from None
    refs: set[str] = set()
    for tool_id in tool_ids:
        try:
            tool = playbook.tool(tool_id)
        except KeyError:
            continue  # on_enter may name a pipeline rather than a tool
        parts: list[Any] = [tool._url, tool._body, *(tool._headers or {}).values()]
        for compiled in parts:
            refs.update(getattr(compiled, "slot_refs", ()) or ())
    if not refs:
        return []
    cache = lookups.cache_for(playbook)
    order = cache.get("declaration_order")
    if order is None:
        order = cache["declaration_order"] = {
            key: i for i, key in enumerate(_declaration_order(playbook))}
    return sorted(refs, key=lambda k: (order.get(k, len(order)), k))


def _declaration_order(playbook: Playbook) -> list[str]:
    keys: dict[str, None] = {}
    for checkpoint in playbook.checkpoints.values():
        keys.update(dict.fromkeys(checkpoint.slots))
    keys.update(dict.fromkeys(playbook.call_start))
    return list(keys)


__all__ = [
    "AUTHORITATIVE_WRITERS",
    "plan_confirm",
    "plan_deny",
    "plan_withdraw",
    "plan_write",
    "read_back_items",
    "requires_status",
    "same_value",
    "status_for",
]
