"""The playbook expression language (SPEC §3): compiled once at load, evaluated every turn.

Text is parsed with :mod:`ast` (``mode="eval"``), checked against a whitelist and turned into a
tree of small closures; nothing is ever ``eval``'d. Evaluation never raises.

Semantics (deliberately different from superdialog 0.3, which collapsed the whole expression to
``None`` on any error):

* Optional chaining: a missing namespace, attribute, key or index along a path is ``None`` for
  that node only, so ``results.nope.ok or True`` is ``True`` and ``not results.nope.ok`` is
  ``True``. Attribute access and ``["key"]`` both read dict keys, wherever the dict came from
  (a list index, ``first()``...). Objects that are not mappings expose no attributes.
* ``<``, ``>``, ``<=``, ``>=`` with ``None`` on either side are ``False``; ``x in None`` is
  ``False`` (and ``x not in None`` is ``True``).
* ``calls.<tool>`` of a tool never called is ``0``.
* Helpers: ``len(None)`` is 0; ``first``/``last`` of None or empty are None; ``pluck`` and
  ``unique`` of None are ``[]``; ``min``/``max`` skip None items (None when nothing is left);
  ``any``/``all`` of None or empty are ``False`` (a vacuous ``all`` must not fire a rule).
* A genuinely impossible operation (``"a" < 1``, ``len(3)``, ``-"x"``) is ``None`` for that
  node and reported once per evaluation through ``on_error(detail)``.

This module is the public face (limits, compile, evaluate); the whitelist check and the closure
builder are in :mod:`._expr_compiler`, path steps, operators and helpers in :mod:`._expr_helpers`.
"""

from __future__ import annotations

import ast
import io
import tokenize
import warnings
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from ._expr_compiler import NAMESPACES, Compiler, ExprContext, ExprError, where
from ._expr_helpers import Node

__all__ = [
    "MAX_DEPTH",
    "MAX_LENGTH",
    "NAMESPACES",
    "CompiledExpr",
    "ExprContext",
    "ExprError",
    "compile_expr",
    "evaluate",
]

MAX_LENGTH = 4096
MAX_DEPTH = 32


class CompiledExpr:
    """A checked, compiled expression; cheap to evaluate, safe to share across calls."""

    __slots__ = ("_node", "slot_refs", "text")

    def __init__(self, text: str, node: Node, slot_refs: frozenset[str]) -> None:
        self.text = text
        self.slot_refs = slot_refs
        self._node = node

    def evaluate(
        self, scope: Mapping[str, Any], on_error: Callable[[str], Any] | None = None
    ) -> Any:
        """Evaluate against ``scope``; never raises. ``on_error`` hears about impossible operations."""
        errors: list[str] = []
        try:
            value = self._node(scope, errors)
        except Exception as exc:  # a scope of the wrong shape, recursion in data: still a value
            errors.append(f"{type(exc).__name__}: {exc}")
            value = None
        if errors and on_error is not None:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            on_error(f"expression {self.text!r}: {errors[0]}{more}")
        return value

    def __repr__(self) -> str:
        return f"CompiledExpr({self.text!r})"


def compile_expr(text: str, *, context: ExprContext | None = None) -> CompiledExpr:
    """Parse, check and compile ``text``; raises :class:`ExprError` saying what to change."""
    if not isinstance(text, str):
        raise ExprError(f"an expression must be a string, got {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise ExprError(f"expression too long: {len(text)} characters (the limit is {MAX_LENGTH})")
    if not text.strip():
        raise ExprError("empty expression")
    # A YAML `|` block keeps its newlines; an expression is one logical line, so join them
    # (any line ending), after cutting comments, which would otherwise swallow the lines after.
    source = " ".join(_without_comments(text).splitlines()).strip()
    if not source:
        raise ExprError("empty expression (only a comment)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning for `x is "a"`, odd escapes
            tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        at = f" at column {exc.offset}" if exc.offset else ""
        raise ExprError(f"syntax error{at}: {exc.msg}") from None
    except (RecursionError, MemoryError):
        raise ExprError(f"expression nested too deeply (the limit is {MAX_DEPTH})") from None
    except ValueError as exc:  # null bytes, unencodable characters
        raise ExprError(f"invalid expression text: {exc}") from None
    _check_depth(tree.body)
    compiler = Compiler(source, context)
    node = compiler.compile(tree.body)
    return CompiledExpr(text, node, frozenset(compiler.slot_refs))


def _without_comments(text: str) -> str:
    """``text`` with each ``# comment`` (outside string literals) cut from its line."""
    if "#" not in text:
        return text
    lines = text.splitlines()
    wrapped = "(\n" + "\n".join(lines) + "\n)"  # inside brackets every line continues the last
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(wrapped).readline))
    except (tokenize.TokenError, SyntaxError):
        return text  # unbalanced or odd text: the parse reports it
    for token in tokens:
        if token.type == tokenize.COMMENT:
            row, col = token.start[0] - 2, token.start[1]
            if 0 <= row < len(lines):
                lines[row] = lines[row][:col]
    return "\n".join(lines)


@lru_cache(maxsize=512)
def _cached(text: str) -> CompiledExpr:
    return compile_expr(text)


def evaluate(
    expr: str | CompiledExpr,
    scope: Mapping[str, Any],
    on_error: Callable[[str], Any] | None = None,
) -> Any:
    """Evaluate text (compiled once, then cached) or a compiled expression against ``scope``.

    Bad text raises :class:`ExprError`; evaluation itself never raises.
    """
    compiled = expr if isinstance(expr, CompiledExpr) else _cached(expr)
    return compiled.evaluate(scope, on_error)


def _check_depth(root: ast.AST) -> None:
    """Reject trees deeper than MAX_DEPTH without recursing (deep input must not blow the stack)."""
    stack: list[tuple[ast.AST, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ExprError(
                f"expression nested too deeply at {where(node)} (the limit is {MAX_DEPTH})"
            )
        for child in ast.iter_child_nodes(node):
            if child._fields:  # contexts and operators (Load, And, Eq) add no depth
                stack.append((child, depth + 1))
