"""Compile every expression and template of a playbook once, at load (SPEC §2.3, §3).

The compiled objects are attached as the private attributes listed in docs/internals.md
(``AdvanceRule._expr``, ``Checkpoint._guidance/_say_verbatim/_exit_say``, ``ToolSpec._when/_url/
_headers/_body``, ``Playbook._views``), so a turn only evaluates and renders. A syntax error,
an unknown namespace, or a read of an undeclared slot becomes a Problem with the path of the
text that holds it, instead of a rule that silently never fires.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import Problem
from .flow_names import NAMESPACES, template_locals
from .lookups import iter_checkpoints, language_of
from .problems import hint_for, join_path

if TYPE_CHECKING:
    from .playbook import Playbook

_NAMED_READ = re.compile(r"\b(results|calls)\s*(?:\.\s*([A-Za-z_][A-Za-z0-9_]*)|\[\s*['\"]([^'\"]+)['\"]\s*\])")
_SLOT_READ = re.compile(r"\bslots\s*(?:\.\s*([A-Za-z_][A-Za-z0-9_]*)|\[\s*['\"]([^'\"]+)['\"]\s*\])")


_CODE = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.DOTALL)
# Names a template may read at its root; any other root is a bare name (renders empty).
_TEMPLATE_ROOTS = NAMESPACES | {"range", "dict", "namespace", "spoken_language", "loop"}


def _locals(source: Any) -> frozenset[str]:
    """Names a template (or every string leaf of a tool body) binds itself."""
    if isinstance(source, str):
        return template_locals(source)
    if isinstance(source, dict):
        return frozenset().union(*(_locals(v) for v in source.values()))
    if isinstance(source, list):
        return frozenset().union(*(_locals(v) for v in source))
    return frozenset()


@functools.lru_cache(maxsize=4096)
def _compile_expr(text: str, declared: frozenset[str], allow_pipeline: bool, allow_env: bool,
                  allow_args: bool) -> Any:
    """A compiled expression, shared by (text, where it may run) like compiled templates."""
    from ..lang import expr

    context = expr.ExprContext(declared_slots=declared, allow_pipeline=allow_pipeline,
                               allow_env=allow_env, allow_args=allow_args)
    return expr.compile_expr(text, context=context)


class _Compiler:
    def __init__(self, playbook: Playbook) -> None:
        from ..lang import expr, templates  # jinja2 is imported by the first load (start-up time)

        self.expr = expr
        self.templates = templates
        self.pb = playbook
        self.declared = playbook.declared_slots()
        self.declared_frozen = frozenset(self.declared)  # hashed once for the compile cache
        self.problems: list[Problem] = []
        self.known = {
            "results": {t.store_response_as for t in playbook.tools if t.store_response_as} | {"pipeline"},
            "calls": {t.id for t in playbook.tools},
        }

    def check_names(self, text: str, path: str) -> None:
        """Warn about ``results.x``/``calls.x`` no tool provides: optional chaining would make
        such a read ``None`` forever, a typo that silently never fires."""
        for match in _NAMED_READ.finditer(text):
            space, name = match.group(1), match.group(2) or match.group(3)
            if name not in self.known[space]:
                what = "no tool stores" if space == "results" else "no tool has that id"
                self.problems.append(Problem(
                    path, f"reads {space}.{name}, but {what}",
                    hint_for(name, self.known[space]) or f"known: {', '.join(sorted(self.known[space])) or 'none'}",
                    "warning"))

    def expression(self, text: str, path: str, *, allow_pipeline: bool, allow_env: bool,
                   allow_args: bool = False) -> Any:
        try:
            compiled = _compile_expr(text, self.declared_frozen, allow_pipeline, allow_env, allow_args)
        except self.expr.ExprError as exc:
            self.problems.append(Problem(path, f"invalid expression: {exc}", self._expr_hint(text, exc)))
            return None
        self.check_names(text, path)
        return compiled

    def _expr_hint(self, text: str, exc: Exception) -> str | None:
        if "did you mean" in str(exc) or "declare" in str(exc):
            return None  # expr.py already says how to fix the slot read
        for match in _SLOT_READ.finditer(text):
            key = match.group(1) or match.group(2)
            if key not in self.declared:
                return hint_for(key, self.declared)
        message = str(exc)
        if "pipeline" in message:
            return "`pipeline` is only readable in the rules of a checkpoint that runs a pipeline"
        if "env" in message:
            return "env values never reach speech or views; read them in rules and tool `when`"
        return None

    def template(self, compile_fn: Callable[[Any], Any], source: Any, path: str, *, speech: bool = False) -> Any:
        try:
            compiled = compile_fn(source)
        except self.templates.TemplateError as exc:
            self.problems.append(Problem(path, f"invalid template: {exc}"))
            return None
        text = source if isinstance(source, str) else json.dumps(source)
        self.check_names(" ".join(_CODE.findall(text)), path)  # template code, not prose
        roots = getattr(compiled, "roots", frozenset()) or frozenset()
        # Three findings superdialog renders as an empty string: warnings here, errors under
        # --strict (SPEC §2.2). The runtime renders them empty too (a tool call refuses).
        if speech and "env" in roots:
            self.soft(path, "speech template reads env, which renders empty (env values never reach the caller)",
                      "read env in tool templates, rules or tool `when` only")
        for name in sorted(roots - _TEMPLATE_ROOTS):
            hint = f"write slots.{name}" if name in self.declared else (
                "qualify it: slots.<key>, results.<key>, call.<name>, views.<name> or clock.<name>")
            self.soft(path, f"template reads bare name {name!r}, which renders empty", hint)
        slot_refs = sorted(getattr(compiled, "slot_refs", ()) or ())
        local = _locals(source) if any(k not in self.declared for k in slot_refs) else frozenset()
        for key in slot_refs:
            if key in self.declared:
                continue
            if key in local:
                self.soft(path, f"template reads slots.{key}, but {key!r} is a template-local variable "
                          "({% set %} or {% for %}), not a slot: slots." + key + " is always empty",
                          f"write {key} without slots.")
            else:
                self.soft(path, f"template reads undeclared slot {key!r}, which renders empty",
                          hint_for(key, self.declared) or "declare it under a checkpoint's slots or in call_start")
        return compiled

    def soft(self, path: str, message: str, hint: str | None) -> None:
        self.problems.append(Problem(path, message, hint, "warning", strict=True))

    def run(self) -> list[Problem]:
        # Spoken forms (spoken_date, spoken_time) default to the playbook's language (SPEC §16).
        compile_speech = functools.partial(self.templates.compile_speech,
                                           language=language_of(self.pb))

        def speech(text: str, path: str) -> Any:
            return self.template(compile_speech, text, path, speech=True)

        for path, _, cp in iter_checkpoints(self.pb):
            for index, rule in enumerate(cp.advance_when):
                if rule.judge == "expr":
                    rule._expr = self.expression(
                        rule.when, join_path(path, "advance_when", index, "when"),
                        allow_pipeline=cp.pipeline is not None, allow_env=True)
            cp._guidance = speech(cp.guidance, join_path(path, "guidance")) if cp.guidance else None
            cp._say_verbatim = (speech(cp.say_verbatim, join_path(path, "say_verbatim"))
                                if cp.say_verbatim is not None else None)
            cp._exit_say = speech(cp.exit_say, join_path(path, "exit_say")) if cp.exit_say else None
        silence = self.pb.policies.silence
        if silence is not None:
            silence._prompts = [speech(text, join_path("policies.silence.prompts", index))
                                for index, text in enumerate(silence.prompts)]
        for index, tool in enumerate(self.pb.tools):
            path = join_path("tools", index)
            if tool.when is not None:
                tool._when = self.expression(tool.when, join_path(path, "when"), allow_pipeline=False,
                                             allow_env=True, allow_args=True)
            tool._url = self.template(self.templates.compile_tool_url, tool.url, join_path(path, "url")) if tool.url else None
            tool._headers = {
                name: self.template(self.templates.compile_tool_text, value, join_path(path, "headers", name))
                for name, value in tool.headers.items()
            }
            tool._body = (self.template(self.templates.compile_tool_body, tool.body, join_path(path, "body"))
                          if tool.body is not None else None)
        self.pb._views = {
            name: self.expression(text, join_path("views", name), allow_pipeline=False, allow_env=False)
            for name, text in self.pb.views.items()
        }
        return self.problems


def compile_playbook(playbook: Playbook) -> list[Problem]:
    """Compile and attach every expression and template; return the problems found."""
    return _Compiler(playbook).run()


__all__ = ["compile_playbook"]
