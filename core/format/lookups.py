"""Playbook lookups for the per-turn path, without pydantic's private-attribute cost.

``Playbook``'s lookups (``checkpoints``, ``slot_spec``, ``needs_confirmation``) and compiled
artifacts (``checkpoint._guidance``, ``playbook._views``) live in pydantic private attributes,
and pydantic 2 reads one through ``BaseModel.__getattr__`` at 2 to 7 µs a read (a plain
attribute is ~0.1 µs); ``needs_confirmation`` makes six such reads. A turn made ~30 of them.
These helpers read the same private values straight from ``__pydantic_private__`` (so they
always see the current value, a lazily compiled template included), and cache per playbook
only what is derived from its public, never-mutated declarations. An object that is not a
loaded ``Playbook`` (a test double) falls back to its public lookups.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .problems import join_path

if TYPE_CHECKING:
    from .playbook import Checkpoint, Playbook, SlotSpec

_CACHES: dict[int, tuple[weakref.ref[Any], dict[Any, Any]]] = {}


def cache_for(playbook: Playbook) -> dict[Any, Any]:
    """The derived-artifact cache of one playbook, dropped when the playbook is collected."""
    key = id(playbook)
    entry = _CACHES.get(key)
    if entry is not None and entry[0]() is playbook:
        return entry[1]
    cache: dict[Any, Any] = {}
    ref = weakref.ref(playbook, lambda _r, key=key: _CACHES.pop(key, None))
    _CACHES[key] = (ref, cache)
    return cache


def _private(obj: Any, name: str) -> Any:
    """``obj.<name>`` for a pydantic private attribute, read without ``__getattr__``."""
    try:
        return obj.__pydantic_private__[name]
    except (AttributeError, KeyError, TypeError):
        return getattr(obj, name)


def checkpoints(playbook: Playbook) -> dict[str, Checkpoint]:
    """``playbook.checkpoints``."""
    try:
        return playbook.__pydantic_private__["_checkpoints"]  # type: ignore[index,no-any-return]
    except (AttributeError, KeyError, TypeError):
        return playbook.checkpoints


def slot_spec(playbook: Playbook, key: str) -> SlotSpec | None:
    """``playbook.slot_spec(key)``: the first checkpoint declaration, else ``call_start``."""
    try:
        private = playbook.__pydantic_private__
        owner = private["_slot_owner"].get(key)  # type: ignore[index]
        cps = private["_checkpoints"]  # type: ignore[index]
    except (AttributeError, KeyError, TypeError):
        return playbook.slot_spec(key)
    if owner is not None:
        return cps[owner].slots[key]  # type: ignore[no-any-return]
    return playbook.call_start.get(key)


def needs_confirmation(playbook: Playbook, key: str) -> bool:
    """``playbook.needs_confirmation(key)``, computed once per playbook and key."""
    cache = cache_for(playbook)
    table = cache.get("needs_confirmation")
    if table is None:
        table = cache["needs_confirmation"] = {}
    value = table.get(key)
    if value is None:
        value = table[key] = bool(playbook.needs_confirmation(key))
    return value  # type: ignore[no-any-return]


def views(playbook: Playbook) -> dict[str, Any]:
    """``playbook._views``: the compiled views."""
    return _private(playbook, "_views")  # type: ignore[no-any-return]


def guidance(checkpoint: Checkpoint) -> Any:
    """``checkpoint._guidance``: the compiled guidance template (None when not compiled)."""
    return _private(checkpoint, "_guidance")


def iter_checkpoints(playbook: Playbook) -> Iterator[tuple[str, str, Checkpoint]]:
    """``(path, ref, checkpoint)`` for every checkpoint in document order."""
    for journey_name, journey in playbook.journeys.items():
        for index, cp in enumerate(journey.checkpoints):
            yield join_path("journeys", journey_name, "checkpoints", index), f"{journey_name}.{cp.id}", cp


def language_of(playbook: Playbook) -> str:
    """The playbook's first language (``guidelines.language`` may list several), else ``en``."""
    language = playbook.guidelines.language
    if isinstance(language, list):
        return language[0] if language else "en"
    return language


__all__ = [
    "cache_for",
    "checkpoints",
    "guidance",
    "iter_checkpoints",
    "language_of",
    "needs_confirmation",
    "slot_spec",
    "views",
]
