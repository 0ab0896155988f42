"""Best-effort validation: every problem of a document in one load.

Pydantic stops at the fields; the cross-reference and compile checks need a model. So when
validation fails, the offending values are removed (an unknown key or a bad value is dropped,
which resets a field to its default; an object missing a required key is dropped whole) and
the document is validated again, until it validates. The checks then run on what remains,
and ``Repair.is_follow_on`` tells which of their problems only the removal caused.

The translation of pydantic errors into ``Problem``s lives in ``validation_errors.py``; its
public names are re-exported here.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import Problem
from .validation_errors import (
    did_you_mean,
    drop_at,
    hint_for,
    join_path,
    model_keys,
    only_unknown_keys,
    problems_from_errors,
    problems_from_validation_error,
    split_path,
    walk_location,
)

_DROPPED: Any = object()  # a removed list item, kept in place so indices stay the author's
_MAX_ROUNDS = 50
_NAME_KEYS = frozenset({"slots", "call_start", "set", "slot_updates", "args", "properties", "collect"})
_HINT_PATH = re.compile(r"(the first is (?:at )?)([^;\s]+)")
_NAMED = re.compile(
    r"(?:unknown (?:checkpoint|tool|pipeline|step|node|action)|undeclared slot|requires key) '([^']*)'")


class Repair:
    """What best-effort validation removed, and how its indices map back to the author's."""

    def __init__(self) -> None:
        self.dropped: list[tuple[tuple[Any, ...], Any, str]] = []  # (doc parts, removed value, error type)
        self._maps: dict[tuple[Any, ...], list[int]] = {}

    def __bool__(self) -> bool:
        return bool(self.dropped)

    @property
    def dropped_values(self) -> bool:
        """True when more than unknown keys was removed (a value, an item, an object)."""
        return any(kind != "extra_forbidden" for _, _, kind in self.dropped)

    # --- the working document --------------------------------------------------------------

    def compact(self, value: Any, parts: tuple[Any, ...] = ()) -> Any:
        """A copy of ``value`` without removed list items (index maps kept for ``original``)."""
        if not parts:
            self._maps = {}
        if isinstance(value, dict):
            return {k: self.compact(v, (*parts, k)) for k, v in value.items()}
        if isinstance(value, list):
            kept = [i for i, item in enumerate(value) if item is not _DROPPED]
            if len(kept) != len(value):
                self._maps[parts] = kept
            return [self.compact(value[i], (*parts, i)) for i in kept]
        return value

    def original_parts(self, parts: Sequence[Any]) -> list[Any]:
        """Parts of a path in the compacted document → the same place in the author's."""
        out: list[Any] = []
        for part in parts:
            kept = self._maps.get(tuple(out))
            if kept is not None and isinstance(part, int) and 0 <= part < len(kept):
                part = kept[part]
            out.append(part)
        return out

    def original_path(self, path: str) -> str:
        parts = split_path(path)
        return path if parts is None else join_path("", *self.original_parts(parts))

    def original(self, problem: Problem) -> Problem:
        """``problem`` with its path (and a path its hint names) in the author's indices."""
        hint = problem.hint
        if hint and self._maps:
            hint = _HINT_PATH.sub(lambda m: m.group(1) + self.original_path(m.group(2)), hint)
        return dataclasses.replace(problem, path=self.original_path(problem.path), hint=hint)

    def _original_loc(self, compact: Any, loc: Sequence[Any]) -> tuple[Any, ...]:
        """A pydantic ``loc`` in the compacted document → the author's (union tags kept)."""
        out: list[Any] = []
        doc_parts: list[Any] = []
        current = compact
        for elem in loc:
            if isinstance(current, list) and isinstance(elem, int) and 0 <= elem < len(current):
                kept = self._maps.get(tuple(doc_parts))
                original = kept[elem] if kept is not None else elem
                current = current[elem]
                out.append(original)
                doc_parts.append(original)
            elif isinstance(current, dict) and elem in current:
                current = current[elem]
                out.append(elem)
                doc_parts.append(elem)
            else:
                out.append(elem)  # a union member tag, or the key that is missing
        return tuple(out)

    def drop(self, work: Any, parts: Sequence[Any], kind: str) -> bool:
        """Remove ``parts`` from ``work``; False when it is not there (any more)."""
        container = work
        for part in parts[:-1]:
            is_key = isinstance(container, dict) and part in container
            is_index = isinstance(container, list) and isinstance(part, int) and 0 <= part < len(container)
            if not (is_key or is_index):
                return False
            container = container[part]
            if container is _DROPPED:
                return False
        last = parts[-1]
        if isinstance(container, dict) and last in container:
            value = container.pop(last)
        elif (isinstance(container, list) and isinstance(last, int) and 0 <= last < len(container)
              and container[last] is not _DROPPED):
            value, container[last] = container[last], _DROPPED
        else:
            return False
        self.dropped.append((tuple(parts), value, kind))
        return True

    # --- follow-on problems ----------------------------------------------------------------

    def _names(self) -> tuple[set[str], set[str]]:
        """Ids, refs and slot names the removed parts declared, and the journeys removed whole."""
        names: set[str] = set()
        journeys: set[str] = set()
        for parts, value, _ in self.dropped:
            found: set[str] = set()
            key = parts[-1] if parts and isinstance(parts[-1], str) else None
            if len(parts) >= 2 and parts[-2] in _NAME_KEYS and isinstance(parts[-1], str):
                found.add(parts[-1])
            _collect_names(value, key, found)
            names |= found
            if len(parts) >= 2 and parts[0] == "journeys" and isinstance(parts[1], str):
                names.update(f"{parts[1]}.{name}" for name in found)
                if len(parts) <= 3:
                    journeys.add(parts[1])
        return names, journeys

    def is_follow_on(self, problem: Problem) -> bool:
        """True when ``problem`` is there only because a repair removed something: it sits at or
        under a removed part, it names an id, ref or slot a removed part declared, or it names
        the removed field of the object it belongs to (``auto`` after its only rule went)."""
        if not self.dropped:
            return False
        match = _NAMED.search(problem.message)
        if match:
            names, journeys = self._names()
            name = match.group(1)
            if name in names or ("." in name and name.split(".", 1)[0] in journeys):
                return True
        parts = split_path(problem.path)
        if parts is None:
            return False
        for dropped, _, kind in self.dropped:
            if tuple(parts[: len(dropped)]) == dropped:
                return True
            if kind == "extra_forbidden":
                continue
            field = list(dropped)
            while field and isinstance(field[-1], int):
                field.pop()
            if not field or not isinstance(field[-1], str):
                continue
            owner = field[:-1]
            if tuple(parts[: len(owner)]) == tuple(owner) and re.search(
                rf"\b{re.escape(field[-1])}\b", problem.message
            ):
                return True
        return False

    def related(self, parts: Sequence[Any]) -> bool:
        """True when ``parts`` is at, under or above a removed part."""
        for dropped, _, _ in self.dropped:
            n = min(len(dropped), len(parts))
            if tuple(parts[:n]) == dropped[:n]:
                return True
        return False


def _collect_names(value: Any, key: str | None, found: set[str]) -> None:
    if key in _NAME_KEYS:
        if isinstance(value, dict):
            found.update(k for k in value if isinstance(k, str))
        elif isinstance(value, list):
            found.update(v for v in value if isinstance(v, str))
        elif isinstance(value, str):
            found.add(value)
    if isinstance(value, dict):
        for k, v in value.items():
            if k in ("id", "store_response_as") and isinstance(v, str):
                found.add(v)
            _collect_names(v, k if isinstance(k, str) else None, found)
    elif isinstance(value, list):
        for item in value:
            _collect_names(item, None, found)


def validate_best_effort(
    model: type[BaseModel], doc: Any, error: ValidationError | None = None
) -> tuple[Any, list[Problem], Repair]:
    """``(instance or None, problems, repair)``: validate ``doc``; on errors, report them all,
    remove what is wrong and validate again until it fits (None when even that fails: a
    required top-level key is missing). ``error`` is the failure of a first attempt, if any.

    Problems that only appear in a later round because of a removal (a required key now
    missing, a list now empty) are not reported. The instance is built from the repaired
    document: map the paths of problems found on it with ``repair.original_path``.
    """
    repair = Repair()
    if error is None:
        try:  # the common case: a valid document needs no repair copy
            return model.model_validate(doc), [], repair
        except ValidationError as exc:
            error = exc
    work = copy.deepcopy(doc)
    problems: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for round_ in range(_MAX_ROUNDS):
        compact = repair.compact(work)
        if round_ == 0 and error is not None:
            errors = error.errors(include_url=False)
        else:
            try:
                return model.model_validate(compact), problems, repair
            except ValidationError as exc:
                errors = exc.errors(include_url=False)
        mapped = [{**err, "loc": repair._original_loc(compact, err["loc"])} for err in errors]
        for problem in problems_from_errors(mapped, model):
            if (problem.path, problem.message) in seen:
                continue
            parts = split_path(problem.path)
            if round_ > 0 and (parts is None or repair.related(parts)):
                continue
            seen.add((problem.path, problem.message))
            problems.append(problem)
        targets: list[tuple[list[Any], str]] = []
        for err in mapped:
            parts, _ = walk_location(model, err["loc"])
            if "[key]" in parts:
                parts = parts[: parts.index("[key]")]
            kind = err["type"]
            targets.append((parts[:-1] if kind == "missing" else parts, kind))
        # A union member that did not fit is no reason to drop the value when another member
        # names the precise problem deeper down (``retry: 11`` resets ``retry``, not the outcome).
        progress = False
        for parts, kind in targets:
            type_miss = kind.endswith("_type")
            if type_miss and any(len(o) > len(parts) and o[: len(parts)] == parts for o, _ in targets):
                continue
            if not parts:
                return None, problems, repair
            progress = repair.drop(work, parts, kind) or progress
        if not progress:
            return None, problems, repair
    return None, problems, repair

__all__ = [
    "Repair",
    "did_you_mean",
    "drop_at",
    "hint_for",
    "join_path",
    "model_keys",
    "only_unknown_keys",
    "problems_from_errors",
    "problems_from_validation_error",
    "split_path",
    "validate_best_effort",
]
