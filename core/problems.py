"""Turning pydantic validation errors into ``Problem``s that a playbook author can act on.

Pydantic reports ``('journeys', 'visit', 'checkpoints', 2, 'advance_when', 0, 'to')`` and
"Extra inputs are not permitted"; authors need ``journeys.visit.checkpoints[2]...`` and
"unknown key 'done_wehn' (did you mean 'done_when'?)". This module walks the model's type
annotations alongside the error location so it can drop pydantic's union-member tags from
the path and name the keys (or literal values) that *are* allowed.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from .errors import Problem

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


def did_you_mean(word: str, candidates: Iterable[str]) -> str | None:
    """The closest candidate to ``word`` (difflib), or None when nothing is close."""
    pool = sorted({c for c in candidates if isinstance(c, str)})
    matches = difflib.get_close_matches(word, pool, n=1, cutoff=0.6)
    if not matches:
        lowered = {c.lower(): c for c in pool}
        matches = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
        return lowered[matches[0]] if matches else None
    return matches[0]


def hint_for(word: str, candidates: Iterable[str]) -> str | None:
    """``did you mean 'x'?`` when a candidate is close to ``word``."""
    match = did_you_mean(word, candidates)
    return f"did you mean {match!r}?" if match else None


def join_path(prefix: str, *parts: str | int) -> str:
    """Append keys and list indices to a dotted path: ``a.b[2].c``; odd keys as ``["a.b"]``."""
    path = prefix
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            path = f"{path}.{part}" if path else part
        else:
            path += f"[{part!r}]"
    return path


# --- walking the model's annotations along an error location ---------------------------


def _unwrap_optional(tp: Any) -> Any:
    if get_origin(tp) in (Union, types.UnionType):
        members = [a for a in get_args(tp) if a is not type(None)]
        if len(members) == 1:
            return _unwrap_optional(members[0])
    if get_origin(tp) is typing.Annotated:
        return _unwrap_optional(get_args(tp)[0])
    return tp


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _member_tag(tp: Any) -> str:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp.__name__
    return getattr(tp, "__name__", str(tp)) if get_origin(tp) is None else str(tp)


def _field_annotation(model: type[BaseModel], key: str) -> Any:
    for name, field in model.model_fields.items():
        if key in (name, field.alias):
            return field.annotation
    return None


def model_keys(model: type[BaseModel]) -> list[str]:
    """The keys an author may write for ``model`` (aliases where set)."""
    return [field.alias or name for name, field in model.model_fields.items()]


def _walk(root: type[BaseModel], loc: Sequence[str | int]) -> tuple[list[str | int], Any]:
    """The author-facing path of ``loc`` (union tags removed) and the type at its parent."""
    tp: Any = root
    parts: list[str | int] = []
    parent: Any = root
    skip_tag = False
    for elem in loc:
        tp = _unwrap_optional(tp)
        if skip_tag or _is_union(tp):
            if _is_union(tp):
                members = [a for a in get_args(tp) if a is not type(None)]
                chosen = next((m for m in members if _member_tag(m) == elem), None)
                if chosen is not None:
                    tp = chosen
                    skip_tag = False
                    continue
            skip_tag = False
        parent = tp
        parts.append(elem)
        origin = get_origin(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            tp = _field_annotation(tp, str(elem))
        elif origin in (list, tuple, set, frozenset, Sequence):
            args = get_args(tp)
            tp = args[0] if args else Any
        elif origin is dict or origin is typing.Mapping:
            args = get_args(tp)
            tp = args[1] if len(args) == 2 else Any
        else:
            tp = Any
    return parts, parent


def _literal_values(tp: Any) -> list[Any]:
    tp = _unwrap_optional(tp)
    if get_origin(tp) is Literal:
        return list(get_args(tp))
    return []


def problems_from_validation_error(
    exc: ValidationError, root: type[BaseModel], prefix: str = ""
) -> list[Problem]:
    """One Problem per pydantic error, with author paths and did-you-mean hints.

    Errors that only say "this union member did not fit" are dropped when another member
    explains the real problem more precisely (a deeper path under the same value).
    """
    return problems_from_errors(exc.errors(include_url=False), root, prefix)


def problems_from_errors(errors: Sequence[Any], root: type[BaseModel], prefix: str = "") -> list[Problem]:
    """``problems_from_validation_error`` for a list of pydantic error dicts."""
    raw: list[tuple[str, Problem, bool]] = []
    for err in errors:
        loc = err["loc"]
        parts, parent = _walk(root, loc)
        path = join_path(prefix, *parts)
        kind = err["type"]
        value = err.get("input")
        is_type_miss = kind.endswith("_type") or kind in ("model_attributes_type",)
        problem = _problem_for(kind, err, path, parts, parent, value, root, loc)
        raw.append((path, problem, is_type_miss))
    paths = [p for p, _, _ in raw]
    kept: list[Problem] = []
    merged: dict[str, list[str]] = {}
    for path, problem, is_type_miss in raw:
        if is_type_miss:
            deeper = any(other.startswith(path) and other != path for other in paths)
            if deeper:
                continue
            merged.setdefault(path, []).append(problem.message)
            continue
        kept.append(problem)
    for path, messages in merged.items():
        unique = list(dict.fromkeys(messages))
        kept.append(Problem(path, " or ".join(unique) if len(unique) > 1 else unique[0]))
    return kept


def _problem_for(
    kind: str,
    err: Any,
    path: str,
    parts: list[str | int],
    parent: Any,
    value: Any,
    root: type[BaseModel],
    loc: Sequence[str | int],
) -> Problem:
    last = parts[-1] if parts else ""
    if kind == "extra_forbidden":
        allowed = model_keys(parent) if isinstance(parent, type) and issubclass(parent, BaseModel) else []
        hint = hint_for(str(last), allowed)
        if hint is None and allowed:
            hint = "allowed keys: " + ", ".join(allowed)
        return Problem(path, f"unknown key {str(last)!r}", hint)
    if kind == "missing":
        return Problem(path, f"required key {str(last)!r} is missing", f"add {last}: ...")
    if kind == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        field_type = _field_annotation(parent, str(last)) if isinstance(parent, type) and issubclass(parent, BaseModel) else None
        allowed = [str(v) for v in _literal_values(field_type)]
        hint = hint_for(str(value), allowed) if isinstance(value, str) else None
        return Problem(path, f"invalid value {value!r}: expected {expected}", hint)
    if kind == "too_short" and isinstance(value, (list, dict)) and not value:
        return Problem(path, "must not be empty", "add at least one entry")
    if kind.endswith("_type") or kind.endswith("_parsing"):
        msg = err["msg"]
        return Problem(path, f"{msg[:1].lower()}{msg[1:]} (got {_short(value)})")
    msg = err["msg"]
    return Problem(path, f"{msg[:1].lower()}{msg[1:]} (got {_short(value)})")


def drop_at(doc: Any, loc: Sequence[Any]) -> None:
    """Delete the key at ``loc`` in ``doc`` (pydantic's union-member tags are skipped)."""
    current = doc
    for elem in loc[:-1]:
        is_key = isinstance(current, dict) and elem in current
        is_index = isinstance(current, list) and isinstance(elem, int) and elem < len(current)
        if is_key or is_index:
            current = current[elem]
    if isinstance(current, dict):
        current.pop(loc[-1], None)


def only_unknown_keys(exc: ValidationError) -> bool:
    """True when every error is an unknown key, so the document minus those keys can be checked."""
    return all(err["type"] == "extra_forbidden" for err in exc.errors(include_url=False))


# --- best-effort validation: every problem in one load ----------------------------------
#
# Pydantic stops at the fields; the cross-reference and compile checks need a model. So when
# validation fails, the offending values are removed (an unknown key or a bad value is dropped,
# which resets a field to its default; an object missing a required key is dropped whole) and
# the document is validated again, until it validates. The checks then run on what remains,
# and ``Repair.is_follow_on`` tells which of their problems only the removal caused.

_DROPPED: Any = object()  # a removed list item, kept in place so indices stay the author's
_MAX_ROUNDS = 50
_NAME_KEYS = frozenset({"slots", "call_start", "set", "slot_updates", "args", "properties", "collect"})
_PATH_TOKEN = re.compile(
    r"(\.)?([A-Za-z_][A-Za-z0-9_\-]*)|\[(\d+)\]|\[('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\]")
_HINT_PATH = re.compile(r"(the first is (?:at )?)([^;\s]+)")
_NAMED = re.compile(
    r"(?:unknown (?:checkpoint|tool|pipeline|step|node|action)|undeclared slot|requires key) '([^']*)'")


def split_path(path: str) -> list[str | int] | None:
    """The parts of a ``join_path`` path, or None when ``path`` is not one."""
    import ast

    parts: list[str | int] = []
    pos = 0
    while pos < len(path):
        match = _PATH_TOKEN.match(path, pos)
        if match is None or match.end() == pos:
            return None
        if match.group(2) is not None:
            if bool(match.group(1)) != (pos > 0):
                return None
            parts.append(match.group(2))
        elif match.group(3) is not None:
            parts.append(int(match.group(3)))
        else:
            parts.append(ast.literal_eval(match.group(4)))
        pos = match.end()
    return parts


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
            parts, _ = _walk(model, err["loc"])
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


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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
