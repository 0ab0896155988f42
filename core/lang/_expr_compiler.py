"""The expression compiler (SPEC §3): a checked :mod:`ast` tree → a tree of small closures.

:func:`superdialog_core.expr.compile_expr` parses and enforces the limits; this module checks
every node against the whitelist (forbidden syntax, ``_`` names, unknown namespaces and
helpers, undeclared slots, ``pipeline``/``env`` where they cannot be used) and builds the
closures that evaluate it. Operators and helpers at evaluation time are in
:mod:`._expr_helpers`. ``ExprError`` and ``ExprContext`` are defined here and imported from
:mod:`superdialog_core.expr`.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._expr_helpers import COMPARATORS, HELPERS, Node, is_number, kind, step, walk_from

NAMESPACES = frozenset({"slots", "results", "env", "call", "calls", "clock", "pipeline", "views", "args"})

_FORBIDDEN: dict[type[ast.AST], str] = {
    ast.BinOp: "arithmetic",
    ast.ListComp: "a list comprehension",
    ast.SetComp: "a set comprehension",
    ast.DictComp: "a dict comprehension",
    ast.GeneratorExp: "a generator expression",
    ast.Lambda: "a lambda",
    ast.JoinedStr: "an f-string",
    ast.FormattedValue: "an f-string",
    ast.Dict: "a dict display",
    ast.Set: "a set display",
    ast.IfExp: "a conditional expression (x if c else y)",
    ast.Slice: "a slice (index one item, e.g. [0])",
    ast.Starred: "a starred argument",
    ast.NamedExpr: "an assignment expression (:=)",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
}


class ExprError(ValueError):
    """An expression that cannot be compiled; the message names the construct and its position."""


@dataclass
class ExprContext:
    """Where an expression lives, so that loading can reject what could never work there.

    ``declared_slots``: the playbook's slot keys (``None`` skips the check); ``allow_pipeline``:
    the rules of a pipeline-owned checkpoint; ``allow_env``: False for views, which the Talker
    sees and env values must never reach; ``allow_args``: a tool's ``when``, which sees the
    arguments the tool is called with (a handler's payload).
    """

    declared_slots: set[str] | frozenset[str] | None = None
    allow_pipeline: bool = False
    allow_env: bool = True
    allow_args: bool = False


def where(node: ast.AST) -> str:
    line = getattr(node, "lineno", None)
    col = getattr(node, "col_offset", None)
    if line is None or col is None:
        return "the expression"
    return f"column {col + 1}" if line == 1 else f"line {line}, column {col + 1}"


def _const(value: Any) -> Node:
    def node(scope: Mapping[str, Any], errors: list[str]) -> Any:
        return value

    node.constant = (value,)  # type: ignore[attr-defined]  # lets parents fold constants
    return node


def _constant_of(node: Node) -> tuple[Any] | None:
    return getattr(node, "constant", None)


class Compiler:
    """Turns a checked AST into closures; records the slot keys it reads."""

    def __init__(self, text: str, context: ExprContext | None) -> None:
        self.text = text
        self.context = context
        self.slot_refs: set[str] = set()

    def fail(self, node: ast.AST, message: str) -> ExprError:
        segment = ast.get_source_segment(self.text, node) or ""
        if len(segment) > 60:
            segment = segment[:57] + "..."
        shown = f" in {segment!r}" if segment else ""
        return ExprError(f"{message} at {where(node)}{shown}")

    def compile(self, node: ast.AST) -> Node:
        for forbidden, label in _FORBIDDEN.items():
            if isinstance(node, forbidden):
                raise self.fail(node, f"forbidden syntax: {type(node).__name__} ({label})")
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise self.fail(node, f"forbidden syntax: {type(node).__name__}")
        return method(node)

    # --- leaves -------------------------------------------------------------------------
    def _Constant(self, node: ast.Constant) -> Node:
        if node.value is not None and not isinstance(node.value, (str, int, float, bool)):
            raise self.fail(node, f"forbidden constant of type {type(node.value).__name__}")
        return _const(node.value)

    def _Name(self, node: ast.Name) -> Node:
        return self._path(node, node, [])

    def _List(self, node: ast.List) -> Node:
        items = [self.compile(e) for e in node.elts]
        consts = [_constant_of(i) for i in items]
        if all(c is not None for c in consts):
            frozen = tuple(c[0] for c in consts)  # type: ignore[index]

            def constant_list(scope: Mapping[str, Any], errors: list[str]) -> Any:
                return list(frozen)

            constant_list.members = frozen  # type: ignore[attr-defined]  # for `in` tests
            return constant_list
        return lambda scope, errors: [item(scope, errors) for item in items]

    def _Tuple(self, node: ast.Tuple) -> Node:
        items = [self.compile(e) for e in node.elts]
        consts = [_constant_of(i) for i in items]
        if all(c is not None for c in consts):
            return _const(tuple(c[0] for c in consts))  # type: ignore[index]
        return lambda scope, errors: tuple(item(scope, errors) for item in items)

    # --- paths --------------------------------------------------------------------------
    def _Attribute(self, node: ast.Attribute) -> Node:
        return self._chain(node)

    def _Subscript(self, node: ast.Subscript) -> Node:
        return self._chain(node)

    def _chain(self, top: ast.expr) -> Node:
        """Flatten a run of `.attr` / `[constant]` into one precomputed walk."""
        steps: list[Any] = []
        node: ast.expr = top
        while True:
            if isinstance(node, ast.Attribute):
                if node.attr.startswith("_"):
                    raise self.fail(node, f"forbidden attribute {node.attr!r}")
                steps.append(node.attr)
                node = node.value
            elif isinstance(node, ast.Subscript) and _static_key(node.slice) is not None:
                steps.append(_static_key(node.slice)[0])  # type: ignore[index]
                node = node.value
            else:
                break
        steps.reverse()
        if isinstance(node, ast.Subscript):  # a dynamic index below the constant steps
            base = self._dynamic_subscript(node)
        elif isinstance(node, ast.Name):
            return self._path(node, top, steps)
        else:
            base = self.compile(node)
        return walk_from(base, tuple(steps)) if steps else base

    def _dynamic_subscript(self, node: ast.Subscript) -> Node:
        if isinstance(node.slice, ast.Slice):
            raise self.fail(
                node.slice, "forbidden syntax: Slice (a slice (index one item, e.g. [0]))"
            )
        base = self.compile(node.value)
        index = self.compile(node.slice)

        def subscript(scope: Mapping[str, Any], errors: list[str]) -> Any:
            container = base(scope, errors)
            key = index(scope, errors)
            if container is None:
                return None
            try:
                return step(container, key)
            except TypeError:
                errors.append(f"cannot index {kind(container)} with {kind(key)}")
                return None

        return subscript

    def _path(self, name: ast.Name, top: ast.expr, steps: list[Any]) -> Node:
        root = name.id
        self._check_root(name)
        if root == "slots" and steps:
            self._check_slot(top, steps[0])
        path = tuple(steps)
        if root == "calls" and len(path) == 1:
            tool = path[0]

            def count(scope: Mapping[str, Any], errors: list[str]) -> Any:
                value = step(scope.get("calls"), tool)
                return 0 if value is None else value

            return count
        if not path:
            return lambda scope, errors: scope.get(root)
        if len(path) == 1:
            key = path[0]
            return lambda scope, errors: step(scope.get(root), key)

        def walk(scope: Mapping[str, Any], errors: list[str]) -> Any:
            current = scope.get(root)
            for key in path:
                if type(current) is dict:
                    current = current.get(key)
                elif current is None:
                    return None
                else:
                    current = step(current, key)
            return current

        return walk

    def _check_root(self, name: ast.Name) -> None:
        root = name.id
        if root.startswith("_"):
            raise self.fail(name, f"forbidden name {root!r}")
        if root in HELPERS:
            raise self.fail(name, f"helper {root!r} must be called, e.g. {root}(...)")
        if root not in NAMESPACES:
            lowered = {"true": "True", "false": "False", "null": "None", "none": "None"}
            if root.lower() in lowered:
                hint = f" (did you mean {lowered[root.lower()]}?)"
            else:
                close = difflib.get_close_matches(root, sorted(NAMESPACES | set(HELPERS)), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
            names = ", ".join(sorted(NAMESPACES))
            raise self.fail(name, f"unknown name {root!r}{hint}; expressions start from {names}")
        ctx = self.context
        if ctx is None:
            return
        if root == "pipeline" and not ctx.allow_pipeline:
            raise self.fail(
                name,
                "'pipeline' is only available in the advance rules of a checkpoint that runs a pipeline",
            )
        if root == "args" and not ctx.allow_args:
            raise self.fail(
                name, "'args' is only available in a tool's `when` and its url, headers and body "
                "(the arguments the tool is called with)",
            )
        if root == "env" and not ctx.allow_env:
            raise self.fail(
                name, "'env' is not available here (views must never expose env values)"
            )

    def _check_slot(self, node: ast.expr, key: Any) -> None:
        if not isinstance(key, str):
            return
        self.slot_refs.add(key)
        declared = None if self.context is None else self.context.declared_slots
        if declared is None or key in declared:
            return
        close = difflib.get_close_matches(key, sorted(declared), n=1)
        hint = (
            f" (did you mean {close[0]!r}?)" if close else " (declare it in a checkpoint's slots)"
        )
        raise self.fail(node, f"undeclared slot {key!r}{hint}")

    # --- operators ----------------------------------------------------------------------
    def _BoolOp(self, node: ast.BoolOp) -> Node:
        values = [self.compile(v) for v in node.values]
        if isinstance(node.op, ast.And):

            def all_of(scope: Mapping[str, Any], errors: list[str]) -> Any:
                value = None
                for operand in values:
                    value = operand(scope, errors)
                    if not value:
                        return value
                return value

            return all_of

        def any_of(scope: Mapping[str, Any], errors: list[str]) -> Any:
            value = None
            for operand in values:
                value = operand(scope, errors)
                if value:
                    return value
            return value

        return any_of

    def _UnaryOp(self, node: ast.UnaryOp) -> Node:
        operand = self.compile(node.operand)
        if isinstance(node.op, ast.Not):
            return lambda scope, errors: not operand(scope, errors)
        if not isinstance(node.op, ast.USub):
            raise self.fail(node, f"forbidden syntax: UnaryOp {type(node.op).__name__}")
        constant = _constant_of(operand)
        if constant is not None and is_number(constant[0]):
            return _const(-constant[0])

        def negate(scope: Mapping[str, Any], errors: list[str]) -> Any:
            value = operand(scope, errors)
            if value is None:
                return None
            if is_number(value):
                return -value
            errors.append(f"cannot negate {kind(value)}")
            return None

        return negate

    def _Compare(self, node: ast.Compare) -> Node:
        first = self.compile(node.left)
        pairs = []
        left_node: ast.expr = node.left
        for op, right in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, (ast.Is, ast.IsNot)):
                self._check_identity(node, left_node, right)
            left_node = right
            operand = self.compile(right)
            members = getattr(operand, "members", None)
            if members is not None and isinstance(op, (ast.In, ast.NotIn)):
                operand = _const(members)  # a constant list: test against the frozen tuple
            pairs.append((COMPARATORS[type(op)], operand))
        if len(pairs) == 1:
            (test, right_node) = pairs[0]
            return lambda scope, errors: test(
                first(scope, errors), right_node(scope, errors), errors
            )

        def chained(scope: Mapping[str, Any], errors: list[str]) -> Any:
            left = first(scope, errors)
            for test, right_node in pairs:
                right = right_node(scope, errors)
                outcome = test(left, right, errors)
                if outcome is not True:
                    return outcome
                left = right
            return True

        return chained

    def _check_identity(self, node: ast.Compare, left: ast.expr, right: ast.expr) -> None:
        """`x is "a"` or `x is 1000` depends on object identity and silently never fires."""
        for side in (left, right):
            literal = isinstance(side, (ast.List, ast.Tuple, ast.UnaryOp)) or (
                isinstance(side, ast.Constant) and type(side.value) not in (type(None), bool)
            )
            if literal:
                raise self.fail(
                    node, "'is' only tests None, True or False; compare values with == or !="
                )

    def _Call(self, node: ast.Call) -> Node:
        if not isinstance(node.func, ast.Name):
            if isinstance(node.func, ast.Attribute):
                raise self.fail(
                    node,
                    "method calls are not allowed; only whitelisted helper calls: "
                    + ", ".join(sorted(HELPERS)),
                )
            raise self.fail(node, "only whitelisted helper calls are allowed")
        name = node.func.id
        if name not in HELPERS:
            close = difflib.get_close_matches(name, sorted(HELPERS), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise self.fail(
                node, f"unknown helper {name!r}{hint}; helpers: {', '.join(sorted(HELPERS))}"
            )
        if node.keywords:
            raise self.fail(node.keywords[0], "forbidden syntax: keyword (keyword arguments)")
        helper, low, high = HELPERS[name]
        count = len(node.args)
        if not low <= count <= high:
            want = str(low) if low == high else f"at least {low}"
            raise self.fail(node, f"{name}() takes {want} argument(s), got {count}")
        args = [self.compile(a) for a in node.args]
        if name == "pluck":
            constant = _constant_of(args[1])
            if (
                constant is not None
                and isinstance(constant[0], str)
                and constant[0].startswith("_")
            ):
                raise self.fail(node.args[1], f"forbidden pluck key {constant[0]!r}")
        if count == 1:
            (only,) = args
            return lambda scope, errors: helper([only(scope, errors)], errors)
        return lambda scope, errors: helper([a(scope, errors) for a in args], errors)


def _static_key(index: ast.expr) -> tuple[Any] | None:
    """A constant `[key]`: a string, or an int (negative too) that is not a bool."""
    if isinstance(index, ast.Constant) and (
        isinstance(index.value, str) or type(index.value) is int
    ):
        return (index.value,)
    if (
        isinstance(index, ast.UnaryOp)
        and isinstance(index.op, ast.USub)
        and isinstance(index.operand, ast.Constant)
        and type(index.operand.value) is int
    ):
        return (-index.operand.value,)
    return None
