"""The sandboxed Jinja environments behind speech and tool templates (SPEC §3).

One job: an immutable sandbox in which attribute access on a dict reads the key (``data.items``
is the key ``items``, never ``dict.items``), nothing can mutate the scope, nothing but data is
printed (a function or template internal would print its repr), and the spoken-form filters
speak the template's language. Parsing and compiling happen once, at load; every syntax or
nesting problem is a :class:`TemplateError`. :mod:`.templates` (speech) and
:mod:`.tool_templates` (strict tool text and bodies) build on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import date, time
from decimal import Decimal
from typing import Any

from jinja2 import TemplateSyntaxError, Undefined, nodes, pass_context
from jinja2.meta import find_undeclared_variables
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .spoken import spoken_date, spoken_digits, spoken_time


class TemplateError(ValueError):
    """A template that cannot be compiled (syntax, unknown filter); the message has the line."""


class Environment(ImmutableSandboxedEnvironment):
    """Dict attributes read keys; with ``none_is_missing`` a null value counts as unset."""

    none_is_missing = False

    def getattr(self, obj: Any, attribute: str) -> Any:
        if isinstance(obj, Mapping):
            return self._lookup(obj, attribute)
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        if isinstance(obj, Mapping):
            return self._lookup(obj, argument)
        value = super().getitem(obj, argument)
        if value is None and self.none_is_missing:
            return self.undefined(obj=obj, name=argument)
        return value

    def _lookup(self, obj: Mapping[Any, Any], key: Any) -> Any:
        try:
            value = obj[key]
        except (KeyError, TypeError):
            return self.undefined(obj=obj, name=key)
        if value is None and self.none_is_missing:
            return self.undefined(obj=obj, name=key)
        return value


# What a template may print: data and dates. A function, class or template internal (``{{
# ''.format }}``, ``{{ range }}``, ``{{ self }}``) would print its repr, e.g. "<function ...>".
_PRINTABLE = (str, int, float, list, tuple, Mapping, date, time, Decimal, Undefined)


def _finalize(value: Any) -> Any:
    if value is None:
        return ""  # a voice never says "None"; null in a URL is refused before it gets here
    if isinstance(value, _PRINTABLE):
        return value
    raise TypeError(f"a {type(value).__name__} is not a value to print")


def make_env(undefined: type[Undefined], *, none_is_missing: bool) -> Environment:
    env = Environment(
        undefined=undefined, autoescape=False, keep_trailing_newline=True, finalize=_finalize
    )
    env.none_is_missing = none_is_missing
    for name in ("lipsum", "cycler", "joiner"):  # nothing a voice or a tool call needs
        del env.globals[name]
    env.filters.update(
        spoken_date=_in_language(spoken_date),
        spoken_time=_in_language(spoken_time),
        spoken_digits=spoken_digits,
    )
    return env


def _in_language(spoken: Callable[[Any, str], Any]) -> Callable[..., Any]:
    """The filter speaks the template's language (the playbook's) unless given one."""

    @pass_context
    def spoken_in(context: Any, value: Any, language: str | None = None) -> Any:
        return spoken(value, language or context.get(_LANGUAGE) or "en")

    return spoken_in


_LANGUAGE = "spoken_language"  # a template global: the language compile_speech was given


Path = tuple[str, tuple[Any, ...]]


def is_literal(text: str) -> bool:
    return "{{" not in text and "{%" not in text and "{#" not in text


References = tuple[frozenset[str], frozenset[str], tuple[Path, ...]]


def parse(env: Environment, text: Any, what: str) -> tuple[nodes.Template, References]:
    """The syntax tree and its references (slot keys, root names, static paths)."""
    if not isinstance(text, str):
        raise TemplateError(f"a {what} template must be a string, got {type(text).__name__}")
    try:
        tree = env.parse(text)
        # Playbook templates stand alone: there is no loader to include or extend from.
        for node in tree.find_all((nodes.Extends, nodes.Include, nodes.Import, nodes.FromImport)):
            tag = {"Extends": "extends", "Include": "include", "Import": "import"}.get(
                type(node).__name__, "from ... import"
            )
            raise TemplateError(
                f"line {node.lineno}: {{% {tag} %}} is not supported in playbook templates"
            )
        return tree, _references(tree)  # the tree walks recurse too
    except TemplateSyntaxError as exc:
        raise TemplateError(f"template syntax error at line {exc.lineno}: {exc.message}") from None
    except (RecursionError, MemoryError):
        raise TemplateError("template nested too deeply") from None


def compile_template(env: Environment, source: str | nodes.Template, language: str = "en") -> Any:
    try:
        return flatten_globals(env.from_string(source, globals={_LANGUAGE: language}))
    except TemplateSyntaxError as exc:  # unknown filters and tests are found here
        raise TemplateError(f"template error at line {exc.lineno}: {exc.message}") from None
    except (RecursionError, MemoryError):
        raise TemplateError("template nested too deeply") from None


def flatten_globals(template: Any) -> Any:
    """Give a compiled template a plain dict of globals instead of Jinja's ChainMap.

    Every render copies the globals into a fresh context; iterating a ChainMap made that copy
    more than half the cost of rendering a short template (20 µs → 9 µs). The environment's
    globals never change after start-up, so a snapshot is exact.
    """
    template.globals = dict(template.globals)
    return template


def _references(tree: nodes.Node) -> References:
    """Slot keys read (``slots.x``, ``slots["x"]``), root names, and every static path."""
    slot_refs: set[str] = set()
    paths: set[Path] = set()
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        steps: list[Any] = []
        current: nodes.Node = node
        while True:
            if isinstance(current, nodes.Getattr):
                steps.append(current.attr)
            elif isinstance(current, nodes.Getitem) and isinstance(current.arg, nodes.Const):
                steps.append(current.arg.value)
            else:
                break
            current = current.node
        if isinstance(current, nodes.Name) and steps:
            steps.reverse()
            paths.add((current.name, tuple(steps)))
            if current.name == "slots" and isinstance(steps[0], str):
                slot_refs.add(steps[0])
    roots = (
        frozenset(find_undeclared_variables(tree))
        if isinstance(tree, nodes.Template)
        else frozenset()
    )
    return frozenset(slot_refs), roots, tuple(sorted(paths, key=lambda p: -len(p[1])))
