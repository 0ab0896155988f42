"""Turning pydantic validation errors into ``Problem``s that a playbook author can act on.

Pydantic reports ``('journeys', 'visit', 'checkpoints', 2, 'advance_when', 0, 'to')`` and
"Extra inputs are not permitted"; authors need ``journeys.visit.checkpoints[2]...`` and
"unknown key 'done_wehn' (did you mean 'done_when'?)". This module walks the model's type
annotations alongside the error location so it can drop pydantic's union-member tags from
the path and name the keys (or literal values) that *are* allowed.
"""
from __future__ import annotations

import ast
import difflib
import functools
import re
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from ..errors import Problem

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")
_PATH_TOKEN = re.compile(
    r"(\.)?([A-Za-z_][A-Za-z0-9_\-]*)|\[(\d+)\]|\[('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\]")


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


@functools.lru_cache(maxsize=8192)  # the same paths come up on every load of a playbook
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


def split_path(path: str) -> list[str | int] | None:
    """The parts of a ``join_path`` path, or None when ``path`` is not one."""
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


def walk_location(root: type[BaseModel], loc: Sequence[str | int]) -> tuple[list[str | int], Any]:
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
        parts, parent = walk_location(root, loc)
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


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = [
    "did_you_mean",
    "drop_at",
    "hint_for",
    "join_path",
    "model_keys",
    "only_unknown_keys",
    "problems_from_errors",
    "problems_from_validation_error",
    "split_path",
    "walk_location",
]
