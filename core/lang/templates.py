"""Sandboxed Jinja templates for speech and tools (SPEC §3), compiled once at load.

Speech (guidance, ``say_verbatim``, ``exit_say``) is forgiving: an unset value is undefined, so
``{{ slots.x | default('?') }}`` works and ``{{ slots.x }}`` says nothing, and a failing part
renders empty with one error detail for a ``degraded`` event. Template syntax never reaches a
model or a caller.

Tool templates (url, headers, body) are strict: anything unset or missing refuses the call with
a :class:`TemplateRefusal` naming it ("slots.day is not set"), so nothing half-filled is sent.
A body leaf that is exactly ``{{ expr }}`` keeps the value's native type.

In every environment attribute access on a dict reads the key (``data.items`` is the key
``items``, never ``dict.items``), and nothing can mutate the scope (immutable sandbox).

This module holds speech templates and is the public face for all templates; the strict tool
side is in :mod:`.tool_templates`, the shared sandbox (environments, parse, compile) in
:mod:`.sandbox`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from jinja2 import ChainableUndefined, nodes

from .sandbox import (
    TemplateError,
    compile_template,
    is_literal,
    join_bounded,
    make_env,
    parse,
    render_bounded,
)
from .tool_templates import (
    TemplateRefusal,
    ToolBody,
    ToolTemplate,
    ToolUrl,
    compile_tool_body,
    compile_tool_text,
    compile_tool_url,
)

__all__ = [
    "SpeechTemplate",
    "TemplateError",
    "TemplateRefusal",
    "ToolBody",
    "ToolTemplate",
    "ToolUrl",
    "compile_speech",
    "compile_tool_body",
    "compile_tool_text",
    "compile_tool_url",
]

_SPEECH_ENV = make_env(ChainableUndefined, none_is_missing=True)


class SpeechTemplate:
    """A forgiving speech template; ``render`` never raises and never shows template syntax."""

    __slots__ = ("_pieces", "_template", "roots", "slot_refs", "text")

    def __init__(self, text: str, language: str = "en") -> None:
        self.text = text
        self._template: Any = None
        # Fallback when the whole render fails: literal text and separately compiled parts
        # (None marks the only dynamic part, which then simply renders empty).
        self._pieces: list[str | tuple[int, Any] | None] = []
        self.slot_refs: frozenset[str] = frozenset()
        self.roots: frozenset[str] = frozenset()
        if is_literal(text):
            return
        tree, (self.slot_refs, self.roots, _) = parse(_SPEECH_ENV, text, "speech")
        self._template = compile_template(_SPEECH_ENV, text, language)  # finds unknown filters, tests
        self._pieces = _split(tree, language)

    def render(self, scope: Mapping[str, Any]) -> tuple[str, str | None]:
        """(text, error detail or None). A failing part is left empty; the rest is spoken."""
        if self._template is None:
            return self.text, None
        try:
            return render_bounded(self._template, scope), None
        except Exception as exc:  # reported as a detail for one `degraded` event
            whole = f"speech template failed: {type(exc).__name__}: {exc}"
        detail: str | None = None
        out: list[str] = []
        variables = dict(scope)
        for piece in self._pieces:
            if isinstance(piece, str):
                out.append(piece)
            elif piece is not None:
                line, template = piece
                context = template.new_context(variables)
                try:
                    out.append(join_bounded(template.root_render_func(context)))
                except Exception as exc:  # this part stays empty; the first failure is reported
                    detail = detail or (
                        f"speech template failed at line {line}: {type(exc).__name__}: {exc}"
                    )
                variables.update(context.vars)  # a top-level {% set %} reaches later parts
        return "".join(out), detail or whole

    def __repr__(self) -> str:
        return f"SpeechTemplate({self.text!r})"


def _split(tree: nodes.Template, language: str) -> list[str | tuple[int, Any] | None]:
    """Top-level parts: literal text, each ``{{ }}`` and each top-level ``{% %}`` block."""
    parts: list[nodes.Node | str] = []
    for node in tree.body:
        if isinstance(node, nodes.Output):
            for child in node.nodes:
                parts.append(child.data if isinstance(child, nodes.TemplateData) else child)
        else:
            parts.append(node)
    dynamic = [p for p in parts if not isinstance(p, str)]
    if len(dynamic) <= 1:
        return [p if isinstance(p, str) else None for p in parts]
    pieces: list[str | tuple[int, Any] | None] = []
    for part in parts:
        if isinstance(part, str):
            pieces.append(part)
            continue
        body = (
            [part] if isinstance(part, nodes.Stmt) else [nodes.Output([part], lineno=part.lineno)]
        )
        wrapper = nodes.Template(body, lineno=1)
        wrapper.set_environment(_SPEECH_ENV)
        pieces.append((part.lineno, compile_template(_SPEECH_ENV, wrapper, language)))
    return pieces


def compile_speech(text: str, *, language: str = "en") -> SpeechTemplate:
    """Compile a speech template (guidance, say_verbatim, exit_say); raises TemplateError.

    ``language`` (the playbook's ``guidelines.language``) is what ``spoken_date`` and
    ``spoken_time`` speak when the template does not name one. Compiled templates are shared
    by text (they never change once built), so a worker that loads the same playbook for
    every call compiles each template once per process (Jinja's compile is most of a load).
    """
    return _compile_speech(text, language)


@functools.lru_cache(maxsize=4096)
def _compile_speech(text: str, language: str) -> SpeechTemplate:
    return SpeechTemplate(text, language)
