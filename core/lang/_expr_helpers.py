"""Runtime pieces of the expression language: path steps, comparisons and the whitelisted helpers.

Every function takes the error list of the current evaluation; an impossible operation appends
a detail and yields ``None`` instead of raising (see :mod:`superdialog_core.expr`).
"""

from __future__ import annotations

import ast
import json
import operator
from collections.abc import Callable, Mapping
from typing import Any

_Sequence = (list, tuple)


def kind(value: Any) -> str:
    """A short type name for error details (``None``, ``str``, ``int``...)."""
    return "None" if value is None else type(value).__name__


# A compiled node: (scope, error details of this evaluation) -> value.
Node = Callable[[Mapping[str, Any], list[str]], Any]


# --- paths ---------------------------------------------------------------------------------
def step(current: Any, key: Any) -> Any:
    """One optional-chaining step: a dict key, or a list/str index; anything else is None."""
    if type(current) is dict:
        return current.get(key)
    if current is None:
        return None
    if isinstance(current, Mapping):
        return current.get(key)
    if type(key) is int and isinstance(current, (list, tuple, str)):
        return current[key] if -len(current) <= key < len(current) else None
    return None


def walk_from(base: Node, path: tuple[Any, ...]) -> Node:
    """A node that follows ``path`` from what ``base`` gives, None as soon as a step is missing."""

    def walk(scope: Mapping[str, Any], errors: list[str]) -> Any:
        current = base(scope, errors)
        for key in path:
            if current is None:
                return None
            current = step(current, key)
        return current

    return walk


def is_number(value: Any) -> bool:
    """An int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# --- comparisons ----------------------------------------------------------------------------
def _equal(left: Any, right: Any, errors: list[str]) -> Any:
    try:
        return bool(left == right)
    except Exception as exc:  # exotic objects only; JSON values always compare
        errors.append(f"cannot compare {kind(left)} == {kind(right)}: {exc}")
        return None


def _not_equal(left: Any, right: Any, errors: list[str]) -> Any:
    outcome = _equal(left, right, errors)
    return None if outcome is None else not outcome


def _ordering(test: Callable[[Any, Any], Any], symbol: str) -> Callable[..., Any]:
    def compare(left: Any, right: Any, errors: list[str]) -> Any:
        if left is None or right is None:
            return False  # optional chaining: a missing value is never less or greater
        try:
            return bool(test(left, right))
        except TypeError:
            errors.append(f"cannot compare {kind(left)} {symbol} {kind(right)}")
            return None

    return compare


def contains_in(item: Any, container: Any, errors: list[str]) -> Any:
    """``item in container`` with ``x in None`` False and type mismatches reported."""
    if container is None:
        return False
    if isinstance(container, str):
        if item is None:
            return False
        if not isinstance(item, str):
            errors.append(f"cannot test {kind(item)} in str")
            return None
        return item in container
    if isinstance(container, (*_Sequence, Mapping, set, frozenset)):
        try:
            return item in container
        except TypeError:
            errors.append(f"cannot test {kind(item)} in {kind(container)}")
            return None
    errors.append(f"cannot test membership in {kind(container)}")
    return None


def _not_in(item: Any, container: Any, errors: list[str]) -> Any:
    outcome = contains_in(item, container, errors)
    return None if outcome is None else not outcome


COMPARATORS: dict[type[ast.cmpop], Callable[[Any, Any, list[str]], Any]] = {
    ast.Eq: _equal,
    ast.NotEq: _not_equal,
    ast.Lt: _ordering(operator.lt, "<"),
    ast.LtE: _ordering(operator.le, "<="),
    ast.Gt: _ordering(operator.gt, ">"),
    ast.GtE: _ordering(operator.ge, ">="),
    ast.In: contains_in,
    ast.NotIn: _not_in,
    ast.Is: lambda left, right, errors: left is right,
    ast.IsNot: lambda left, right, errors: left is not right,
}


# --- helpers --------------------------------------------------------------------------------
def _len(args: list[Any], errors: list[str]) -> Any:
    (value,) = args
    if value is None:
        return 0
    if isinstance(value, (str, *_Sequence, Mapping)):
        return len(value)
    errors.append(f"len() of {kind(value)}")
    return None


def _end(index: int, name: str) -> Callable[[list[Any], list[str]], Any]:
    def pick(args: list[Any], errors: list[str]) -> Any:
        (items,) = args
        if items is None:
            return None
        if isinstance(items, (str, *_Sequence)):
            return items[index] if items else None
        errors.append(f"{name}() of {kind(items)}")
        return None

    return pick


def _pluck(args: list[Any], errors: list[str]) -> Any:
    items, key = args
    if items is None:
        return []
    if not isinstance(key, str) or key.startswith("_"):
        errors.append(f"pluck() key must be a string not starting with '_', got {key!r}")
        return None
    if not isinstance(items, _Sequence):
        errors.append(f"pluck() of {kind(items)}")
        return None
    return [item.get(key) if isinstance(item, Mapping) else None for item in items]


def _canonical(item: Any) -> str:
    """One string per distinct unhashable value (dict key order ignored)."""
    try:
        return json.dumps(item, sort_keys=True, separators=(",", ":"), default=repr)
    except (TypeError, ValueError, RecursionError):
        return repr(item)


def _unique(args: list[Any], errors: list[str]) -> Any:
    (items,) = args
    if items is None:
        return []
    if not isinstance(items, _Sequence):
        errors.append(f"unique() of {kind(items)}")
        return None
    seen: set[Any] = set()
    seen_shapes: set[str] = set()
    out: list[Any] = []
    for item in items:
        try:
            if item in seen:
                continue
            seen.add(item)
        except TypeError:  # dicts and lists: compared by their canonical JSON (linear, not n²)
            shape = _canonical(item)
            if shape in seen_shapes:
                continue
            seen_shapes.add(shape)
        out.append(item)
    return out


def _extreme(pick: Callable[..., Any], name: str) -> Callable[[list[Any], list[str]], Any]:
    """min/max over one sequence or over several arguments; None items are skipped."""

    def extreme(args: list[Any], errors: list[str]) -> Any:
        items: Any = args[0] if len(args) == 1 else args
        if items is None:
            return None
        if not isinstance(items, _Sequence):
            errors.append(f"{name}() of {kind(items)}")
            return None
        present = [item for item in items if item is not None]
        if not present:
            return None
        try:
            return pick(present)
        except TypeError:
            errors.append(f"{name}() of mixed types {sorted({kind(i) for i in present})}")
            return None

    return extreme


def _truth(name: str) -> Callable[[list[Any], list[str]], Any]:
    """any()/all(): None and empty are False for both (a vacuous `all` must not fire a rule)."""

    def truth(args: list[Any], errors: list[str]) -> Any:
        (items,) = args
        if items is None:
            return False
        if not isinstance(items, (*_Sequence, Mapping)):
            errors.append(f"{name}() of {kind(items)}")
            return None
        if name == "all":
            return bool(items) and all(items)
        return any(items)

    return truth


def _case(name: str) -> Callable[[list[Any], list[str]], Any]:
    def change(args: list[Any], errors: list[str]) -> Any:
        (value,) = args
        if value is None:
            return None
        if isinstance(value, str):
            return value.lower() if name == "lower" else value.upper()
        errors.append(f"{name}() of {kind(value)}")
        return None

    return change


_MANY = 1 << 16
# name -> (function, least arguments, most arguments)
HELPERS: dict[str, tuple[Callable[[list[Any], list[str]], Any], int, int]] = {
    "len": (_len, 1, 1),
    "first": (_end(0, "first"), 1, 1),
    "last": (_end(-1, "last"), 1, 1),
    "pluck": (_pluck, 2, 2),
    "unique": (_unique, 1, 1),
    "min": (_extreme(min, "min"), 1, _MANY),
    "max": (_extreme(max, "max"), 1, _MANY),
    "any": (_truth("any"), 1, 1),
    "all": (_truth("all"), 1, 1),
    "lower": (_case("lower"), 1, 1),
    "upper": (_case("upper"), 1, 1),
}
