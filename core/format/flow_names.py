"""Bare names in legacy flow templates, qualified at the identifier level (SPEC §2.1).

superdialog's graph engine renders a flow's templates with every bare name in scope (action
results, slots, dispatch-time values, env, the time of day); our namespaces are explicit. So
each *head* identifier inside ``{{ }}`` and ``{% %}`` is rewritten: an action's store key →
``results.X`` (``.success`` → ``.ok``), an edge-schema property → ``slots.X``, a flow env key →
``env.X`` (or a call-start value when only speech reads it), ``current_time*`` /
``current_date`` → ``clock.*``, and any other name → a call-start value ``slots.X``.

Not rewritten: attributes (``x.name``), filter and test names (``x|default``, ``x is defined``),
keyword arguments (``f(attribute='b')``), string literals, Jinja keywords and globals, the
names a template binds itself (``{% set %}``, ``{% for %}``, macro arguments), and names that
already are a namespace. The template is walked with Jinja's own lexer, whose tokens give the
source back exactly, so text outside the blocks is never touched.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from jinja2 import Environment, TemplateSyntaxError, nodes

_ENV = Environment()

# Names that are never a read of a flow value.
_KEYWORDS = frozenset({
    "and", "or", "not", "in", "is", "if", "else", "elif", "endif", "for", "endfor", "set",
    "endset", "macro", "endmacro", "call", "endcall", "filter", "endfilter", "block", "endblock",
    "with", "endwith", "raw", "endraw", "recursive", "import", "include", "extends", "from", "as",
    "ignore", "missing", "context", "without", "scoped", "required", "break", "continue", "do",
    "true", "false", "none", "True", "False", "None", "loop", "caller", "super", "self",
    "varargs", "kwargs", "range", "dict", "namespace", "spoken_language",
})
NAMESPACES = frozenset({"slots", "results", "env", "call", "calls", "views", "clock", "args"})
_CODE = frozenset({"variable_begin", "block_begin"})
_CODE_END = frozenset({"variable_end", "block_end"})


def template_locals(text: str) -> frozenset[str]:
    """Names the template binds itself: ``{% set %}`` / ``{% for %}`` targets, macro args."""
    try:
        tree = _ENV.parse(text)
    except TemplateSyntaxError:
        return frozenset()
    names: set[str] = set()
    for node in tree.find_all((nodes.Assign, nodes.AssignBlock, nodes.For, nodes.Macro, nodes.CallBlock)):
        targets = [node.target] if isinstance(node, (nodes.Assign, nodes.AssignBlock, nodes.For)) else node.args
        for target in targets:
            if isinstance(target, nodes.Name):
                names.add(target.name)
            else:
                names.update(n.name for n in target.find_all(nodes.Name))
        if isinstance(node, nodes.Macro):
            names.add(node.name)
    return frozenset(names)


Plan = tuple[tuple[str, ...], tuple[tuple[int, str, int], ...]]


@functools.lru_cache(maxsize=4096)
def _plan(text: str) -> Plan | None:
    """The template's tokens (Jinja's raw lexer gives the text back exactly) and its head names
    as ``(token index, name, index of a directly following ``.success`` name or -1)``; None
    when it does not lex. Cached by text: a flow's templates are planned once per process."""
    try:
        tokens = list(_ENV.lex(text))
    except TemplateSyntaxError:
        return None
    local = template_locals(text)
    found: list[tuple[int, str, int]] = []
    inside = False
    for i, (_, kind, value) in enumerate(tokens):
        if kind in _CODE:
            inside = True
        elif kind in _CODE_END:
            inside = False
        if not inside or kind != "name":
            continue
        prev = _significant(tokens, i, -1)
        prev_value = tokens[prev][2] if prev >= 0 else ""
        nxt = _significant(tokens, i, 1)
        next_value = tokens[nxt][2] if nxt < len(tokens) else ""
        before_prev = tokens[_significant(tokens, prev, -1)][2] if prev > 0 else ""
        is_test = prev_value == "is" or (prev_value == "not" and before_prev == "is")
        if (prev_value in (".", "|") or is_test or next_value in ("=", "(") or prev_value == "filter"
                or value in _KEYWORDS or value in local or value in NAMESPACES):
            continue  # an attribute, filter, test, kwarg, call, keyword, local or namespace
        success = i + 2 if (i + 2 < len(tokens) and tokens[i + 1][2] == "."
                            and tokens[i + 2][1:] == ("name", "success")) else -1
        found.append((i, value, success))
    return tuple(t[2] for t in tokens), tuple(found)


def _significant(tokens: list[tuple[int, str, str]], start: int, step: int) -> int:
    i = start + step
    while 0 <= i < len(tokens) and tokens[i][1] == "whitespace":
        i += step
    return i


def heads(text: str) -> list[str] | None:
    """The bare head names the template reads (None when it does not lex)."""
    if "{{" not in text and "{%" not in text:
        return []
    plan = _plan(text)
    return None if plan is None else [name for _, name, _ in plan[1]]


def rewrite(text: str, resolve: Callable[[str], str | None]) -> str | None:
    """``text`` with each head name replaced by ``resolve(name)`` (None: kept as written); a
    ``.success`` right after a name that became ``results.X`` becomes ``.ok``.

    Returns None when the template does not lex; the caller keeps it, and the load's template
    compile then reports the syntax error at its path."""
    if "{{" not in text and "{%" not in text:
        return text
    plan = _plan(text)
    if plan is None:
        return None
    pieces, found = plan
    if not found:
        return text
    out = list(pieces)
    for index, name, success in found:
        replaced = resolve(name)
        if replaced is None:
            continue
        out[index] = replaced
        if success >= 0 and replaced.startswith("results."):
            out[success] = "ok"
    return "".join(out)

__all__ = ["NAMESPACES", "heads", "rewrite", "template_locals"]
