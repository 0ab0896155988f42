"""The sandboxed Jinja environments behind speech and tool templates (SPEC §3).

One job: an immutable sandbox in which attribute access on a dict reads the key (``data.items``
is the key ``items``, never ``dict.items``), nothing can mutate the scope, nothing but data is
printed (a function or template internal would print its repr), and the spoken-form filters
speak the template's language. Parsing and compiling happen once, at load; every syntax or
nesting problem is a :class:`TemplateError`. :mod:`.templates` (speech) and
:mod:`.tool_templates` (strict tool text and bodies) build on it.
"""

from __future__ import annotations

import re
import string
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


# Bounds on the work a template can do (SPEC §13): a voice line or a URL never needs more.
MAX_RANGE = 10_000  # items in one range()
MAX_RANGE_TOTAL = 100_000  # range() items in one render (bounds nested loops over ranges)
MAX_REPEAT = 64 * 1024  # characters (or items) a "*" repetition may produce
MAX_POWER_BITS = 256  # an integer power may produce (about 77 digits)
MAX_OUTPUT = 256 * 1024  # characters one render may print (bounds loops over data lists)


class TemplateBoundError(OverflowError):
    """A template asked for more work than the sandbox allows (see the MAX_* bounds)."""


def join_bounded(chunks: Any) -> str:
    """The rendered chunks joined; stops as soon as they pass MAX_OUTPUT characters.

    Loops over data (not ranges) are bounded only by the data, and nested ones multiply it:
    stopping at the output bound ends the work too, since the render is a generator.
    """
    out: list[str] = []
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > MAX_OUTPUT:
            raise TemplateBoundError(
                f"the template printed more than {MAX_OUTPUT} characters, the sandbox's limit")
        out.append(chunk)
    return "".join(out)


def render_bounded(template: Any, scope: Mapping[str, Any]) -> str:
    """``template.render(scope)`` under the output bound (see ``join_bounded``)."""
    return join_bounded(template.root_render_func(template.new_context(dict(scope))))


def _repeat_size(left: Any, right: Any) -> int | None:
    """The length a ``*`` repetition would produce, None when it is not a repetition."""
    if isinstance(left, int) and not isinstance(left, bool) and isinstance(right, (str, list, tuple)):
        left, right = right, left
    if isinstance(left, (str, list, tuple)) and isinstance(right, int) and not isinstance(right, bool):
        return len(left) * max(right, 0)
    return None


def _power_bits(base: Any, exponent: Any) -> int | None:
    if (isinstance(base, int) and isinstance(exponent, int) and not isinstance(base, bool)
            and not isinstance(exponent, bool) and exponent > 0):
        return max(abs(base).bit_length() - (1 if abs(base) <= 1 else 0), 0) * exponent
    return None


# A printf-style conversion's width and precision (``%-10.3f``, ``%*s``, ``%(name)5s``).
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\d+|\*)?(?:\.(\d+|\*))?")


def _too_wide(width: int) -> TemplateBoundError:
    return TemplateBoundError(
        f"a field width of {width} characters is over the sandbox's {MAX_REPEAT} limit")


def _check_numbers(values: Any) -> None:
    """Ints among the values of a format call that may serve as a width (``*`` or ``{}``)."""
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool) and value > MAX_REPEAT:
            raise _too_wide(value)


def _check_percent(fmt: str, args: Any) -> None:
    """Refuse a ``%`` format whose widths would build more than MAX_REPEAT characters."""
    star = False
    for match in _PERCENT_SPEC.finditer(fmt):
        for group in match.groups():
            if group == "*":
                star = True
            elif group and int(group) > MAX_REPEAT:
                raise _too_wide(int(group))
    if star:
        _check_numbers(args if isinstance(args, tuple) else (args,))


def _check_format(fmt: str, args: Any, kwargs: Mapping[str, Any]) -> None:
    """Refuse a ``str.format`` whose field widths would build more than MAX_REPEAT characters."""
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError:
        return  # a malformed format string: str.format itself refuses it
    for _, _, spec, _ in fields:
        if not spec:
            continue
        for digits in re.findall(r"\d+", spec):
            if int(digits) > MAX_REPEAT:
                raise _too_wide(int(digits))
        if "{" in spec:  # a width from the arguments
            values = [*args, *kwargs.values()]
            values += [v for a in args if isinstance(a, Mapping) for v in a.values()]
            _check_numbers(values)


def _check_binop(operator: str, left: Any, right: Any) -> None:
    if operator == "%" and isinstance(left, str):
        _check_percent(left, right)
    elif operator == "*":
        size = _repeat_size(left, right)
        if size is not None and size > MAX_REPEAT:
            raise TemplateBoundError(
                f"a repetition of {size} characters or items is over the sandbox's "
                f"{MAX_REPEAT} limit")
    elif operator == "**":
        bits = _power_bits(left, right)
        if bits is not None and bits > MAX_POWER_BITS:
            raise TemplateBoundError(
                f"{left} ** {right} is too large for a template (at most {MAX_POWER_BITS} bits)")


@pass_context
def _bounded_range(context: Any, *args: Any) -> range:
    """``range`` with at most MAX_RANGE items, and MAX_RANGE_TOTAL items in one render."""
    items = range(*args)
    if len(items) > MAX_RANGE:
        raise TemplateBoundError(
            f"range of {len(items)} items is over the sandbox's {MAX_RANGE} limit")
    used = getattr(context.eval_ctx, "range_items", 0) + len(items)
    if used > MAX_RANGE_TOTAL:
        raise TemplateBoundError(
            f"loops over ranges would run {used} times in one render, over the sandbox's "
            f"{MAX_RANGE_TOTAL} limit")
    context.eval_ctx.range_items = used
    return items


class Environment(ImmutableSandboxedEnvironment):
    """Dict attributes read keys; with ``none_is_missing`` a null value counts as unset."""

    none_is_missing = False
    # Repetition, powers and % formatting are checked before they run (the sandbox's
    # call_binop; an intercepted operator is also never computed while compiling).
    intercepted_binops = frozenset({"*", "**", "%"})

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fmt = value.__self__

        def checked(*args: Any, **kwargs: Any) -> str:
            _check_format(fmt, args, kwargs)
            return wrapped(*args, **kwargs)

        return checked

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _check_binop(operator, left, right)
        return super().call_binop(context, operator, left, right)

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


def _bounded_format_filter(value: Any, *args: Any, **kwargs: Any) -> str:
    """Jinja's ``format`` filter (``value % args``) with the widths bounded."""
    if args and kwargs:
        raise TypeError("the format filter takes positional or keyword arguments, not both")
    values: Any = kwargs or args
    _check_percent(str(value), values if kwargs else tuple(values))
    return str(value) % (kwargs or args)


def _bounded_center(value: Any, width: int = 80) -> str:
    """Jinja's ``center`` filter with the width bounded."""
    if isinstance(width, int) and width > MAX_REPEAT:
        raise _too_wide(width)
    return str(value).center(width)


def make_env(undefined: type[Undefined], *, none_is_missing: bool) -> Environment:
    env = Environment(
        undefined=undefined, autoescape=False, keep_trailing_newline=True, finalize=_finalize
    )
    env.none_is_missing = none_is_missing
    for name in ("lipsum", "cycler", "joiner"):  # nothing a voice or a tool call needs
        del env.globals[name]
    env.globals["range"] = _bounded_range
    env.filters["format"] = _bounded_format_filter
    env.filters["center"] = _bounded_center
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
        _check_literal_bounds(tree)
        return tree, _references(tree)  # the tree walks recurse too
    except TemplateSyntaxError as exc:
        raise TemplateError(f"template syntax error at line {exc.lineno}: {exc.message}") from None
    except (RecursionError, MemoryError):
        raise TemplateError("template nested too deeply") from None


def _const(node: nodes.Node) -> Any:
    """The value of a constant expression built from literals, ``*``, ``**``, ``+``, ``-``.

    Each step is bounds-checked before it runs, so ``'a' * 10**8`` is refused without being
    built. Anything else is ``nodes.Impossible``.
    """
    if isinstance(node, nodes.Const):
        return node.value
    if isinstance(node, nodes.Neg):
        value = _const(node.node)
        if isinstance(value, int):
            return -value
        raise nodes.Impossible()
    if isinstance(node, nodes.Tuple):
        return tuple(_const(item) for item in node.items)
    if isinstance(node, (nodes.Mul, nodes.Pow, nodes.Add, nodes.Mod)):
        left, right = _const(node.left), _const(node.right)
        operator = {nodes.Mul: "*", nodes.Pow: "**", nodes.Add: "+", nodes.Mod: "%"}[type(node)]
        _check_binop(operator, left, right)
        if operator == "%":
            raise nodes.Impossible()  # checked only: its value is not needed here
        try:
            return {"*": lambda a, b: a * b, "**": lambda a, b: a**b,
                    "+": lambda a, b: a + b}[operator](left, right)
        except (TypeError, ValueError, ZeroDivisionError):
            raise nodes.Impossible() from None
        except OverflowError:  # a float result out of range (10.0 ** 400)
            raise TemplateBoundError(
                f"{left!r} {operator} {right!r} is out of range for a number") from None
    raise nodes.Impossible()


def _literal_range(node: nodes.Node) -> int | None:
    """The length of ``range(<constants>)``, None when it is anything else."""
    if not (isinstance(node, nodes.Call) and isinstance(node.node, nodes.Name)
            and node.node.name == "range" and not node.kwargs):
        return None
    try:
        args = [_const(arg) for arg in node.args]
        return len(range(*args))
    except (nodes.Impossible, TypeError, ValueError):
        return None


def _check_literal_bounds(tree: nodes.Template) -> None:
    """Refuse at load what would break a sandbox bound whatever the data (SPEC §13)."""
    try:
        for node in tree.find_all((nodes.Mul, nodes.Pow, nodes.Mod)):
            try:
                _const(node)
            except nodes.Impossible:
                continue
        for node in tree.find_all(nodes.Call):
            size = _literal_range(node)
            if size is not None and size > MAX_RANGE:
                raise TemplateBoundError(
                    f"range of {size} items is over the sandbox's {MAX_RANGE} limit")
        _check_loops(tree, 1)
    except TemplateBoundError as exc:
        lineno = getattr(exc, "lineno", None)
        raise TemplateError(f"template would do too much work: {exc}"
                            + (f" (line {lineno})" if lineno else "")) from None


def _check_loops(node: nodes.Node, outer: int) -> None:
    """Nested loops over literal ranges: their product is bounded like the render total."""
    for child in node.iter_child_nodes():
        runs = outer
        if isinstance(child, nodes.For):
            size = _literal_range(child.iter)
            if size is not None:
                runs = outer * max(size, 1)
                if runs > MAX_RANGE_TOTAL:
                    raise TemplateBoundError(
                        f"nested loops would run {runs} times, over the sandbox's "
                        f"{MAX_RANGE_TOTAL} limit")
        _check_loops(child, runs)


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
