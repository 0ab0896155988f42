"""Strict tool templates (SPEC §3): url, headers and body, compiled once at load.

Anything unset or missing refuses the call with a :class:`TemplateRefusal` naming it
("slots.day is not set"), so nothing half-filled is ever sent. A body is any JSON structure; a
string leaf that is exactly ``{{ expr }}`` keeps the value's native type (an int stays an int),
an unset optional slot there becomes null, and what it gives is a fresh JSON copy.
Import these names from :mod:`superdialog_core.templates`.
"""

from __future__ import annotations

import functools
import math
import re
import types
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from jinja2 import StrictUndefined, TemplateSyntaxError, Undefined, nodes
from jinja2.exceptions import UndefinedError
from jinja2.utils import missing

from .sandbox import (
    Path,
    TemplateError,
    compile_template,
    flatten_globals,
    is_literal,
    make_env,
    parse,
    render_bounded,
)


class TemplateRefusal(ValueError):
    """A tool template touched something unset or missing; ``message`` names it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _Missing(UndefinedError):
    """Raised by strict undefineds; carries the undefined so the path can be named."""

    def __init__(self, undefined: Undefined) -> None:
        super().__init__(undefined._undefined_message)
        self.undefined = undefined


class _RecordingUndefined(StrictUndefined):
    """Strict, but the failure carries itself so the refusal can name the whole path."""

    __slots__ = ()

    def _fail_with_undefined_error(self, *args: Any, **kwargs: Any) -> Any:
        if self._undefined_exception is not UndefinedError:  # sandbox: keep SecurityError
            raise self._undefined_exception(self._undefined_message)
        raise _Missing(self)


# Jinja binds its failing dunders (__str__, __add__, __iter__...) to the base function object,
# so an override alone would not reach them: rebind every one of them to ours.
for _name, _value in {**vars(Undefined), **vars(StrictUndefined)}.items():
    if _value is Undefined._fail_with_undefined_error and _name != "_fail_with_undefined_error":
        setattr(_RecordingUndefined, _name, _RecordingUndefined._fail_with_undefined_error)


_TEXT_ENV = make_env(_RecordingUndefined, none_is_missing=True)  # urls, headers, text leaves
_VALUE_ENV = make_env(_RecordingUndefined, none_is_missing=False)  # typed body leaves: null stays
_URL_ENV = make_env(_RecordingUndefined, none_is_missing=True)  # urls: values encoded
_URL_ENV.filters["url_component"] = lambda value: _url_component(value)


def _format_path(root: str, steps: tuple[Any, ...]) -> str:
    text = root
    for step in steps:
        if isinstance(step, str) and step.isidentifier():
            text += f".{step}"
        else:
            text += f"[{step!r}]"
    return text


def _child(current: Any, key: Any) -> Any:
    if isinstance(current, Mapping):
        return current.get(key, missing) if isinstance(key, str | int) else missing
    if (
        type(key) is int
        and isinstance(current, list | tuple)
        and -len(current) <= key < len(current)
    ):
        return current[key]
    return missing


def _locate(
    undefined: Undefined, paths: tuple[Path, ...], scope: Mapping[str, Any]
) -> tuple[str, str]:
    """(root, readable path) of what an undefined stands for, found by walking the static paths."""
    obj, name = undefined._undefined_obj, undefined._undefined_name
    if obj is missing:
        return str(name), str(name)
    for root, steps in paths:
        current = scope.get(root, missing)
        for index, step in enumerate(steps):
            if current is obj and step == name:
                return root, _format_path(root, steps[: index + 1])
            current = _child(current, step)
            if current is missing:
                break
    return "", f"{name!r}"


def _refusal(undefined: Undefined, paths: tuple[Path, ...], scope: Mapping[str, Any]) -> str:
    root, where = _locate(undefined, paths, scope)
    obj = undefined._undefined_obj
    if root == "slots" and where.count(".") == 1 and "[" not in where:
        return f"{where} is not set"
    if isinstance(obj, Mapping) and obj.get(undefined._undefined_name, missing) is None:
        return f"{where} is null"
    return f"{where} is missing"


class ToolTemplate:
    """A strict text template (url, header, text leaf); ``render`` raises :class:`TemplateRefusal`."""

    __slots__ = ("_paths", "_template", "roots", "slot_refs", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._template: Any = None
        self._paths: tuple[Path, ...] = ()
        self.slot_refs: frozenset[str] = frozenset()
        self.roots: frozenset[str] = frozenset()
        if is_literal(text):
            return
        _, (self.slot_refs, self.roots, self._paths) = parse(_TEXT_ENV, text, "tool")
        self._template = compile_template(_TEXT_ENV, text)  # finds unknown filters and tests

    def render(self, scope: Mapping[str, Any]) -> str:
        """The rendered text; refuses rather than send anything half-filled."""
        if self._template is None:
            return self.text
        try:
            return render_bounded(self._template, scope)
        except _Missing as exc:
            raise TemplateRefusal(_refusal(exc.undefined, self._paths, scope)) from None
        except Exception as exc:  # any other failure is a refusal too, never a crash
            raise TemplateRefusal(f"template failed: {type(exc).__name__}: {exc}") from None

    def __repr__(self) -> str:
        return f"ToolTemplate({self.text!r})"


class _DotSegment(ValueError):
    pass


def _url_component(value: Any) -> str:
    """A templated URL value, percent-encoded as ONE component (no ``/``, ``?``, ``#``, ``&``)."""
    if isinstance(value, Undefined):
        str(value)  # strict: raises the refusal naming what is missing
    if isinstance(value, (Mapping, list, tuple)):
        raise TypeError(f"a {type(value).__name__} cannot stand in a URL; use one of its values")
    text = value if isinstance(value, str) else _finalize_text(value)
    if text in (".", ".."):
        raise _DotSegment(f"a URL value is {text!r}, which would move along the path")
    # An unpaired surrogate cannot be encoded: it becomes U+FFFD, like text at every boundary.
    return quote(text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace"), safe="")


def _finalize_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _env_only(node: nodes.Node) -> bool:
    """True when an expression reads nothing but ``env`` (or only constants)."""
    names = [node] if isinstance(node, nodes.Name) else []
    names.extend(node.find_all(nodes.Name))
    return all(name.name == "env" for name in names)


class _Authority:
    """Tracks, in document order, whether the URL's scheme, host and port are behind us."""

    def __init__(self) -> None:
        self.shape: list[str] = []  # literal text, and "\0" for an env part (opaque)

    def ended(self) -> bool:
        shape = "".join(self.shape)
        at = shape.find("://")
        rest = shape[at + 3 :] if at != -1 else shape
        return any(mark in rest for mark in "/?#")


def _wrap_url_values(tree: nodes.Template, text: str) -> None:
    """Encode every non-env output; refuse one before the end of the authority (load error)."""
    for name in tree.find_all(nodes.Name):
        if name.name == "env" and name.ctx in ("store", "param"):
            # env.* is used as written: a template-made ``env`` would carry values in raw.
            raise TemplateError(
                f"tool url {text!r}: the template binds the name env (line {name.lineno}); "
                "env means the playbook's env values here, so pick another name")
    authority = _Authority()
    done = False

    def refuse(node: nodes.Node) -> None:
        raise TemplateError(
            f"tool url {text!r}: a value that is not env.* stands before the end of the host "
            f"(line {node.lineno}); the scheme, host and port come only from the playbook's "
            "text and env values; put conversation values in the path or the query")

    for top in tree.body:
        if isinstance(top, nodes.Output):
            for child in top.nodes:
                if isinstance(child, nodes.TemplateData):
                    if not done:
                        authority.shape.append(child.data)
                elif _env_only(child):
                    if not done:
                        authority.shape.append("\0")
                else:
                    if not done and not authority.ended():
                        refuse(child)
                    done = True
        elif not done:
            if not _env_only(top):
                if not authority.ended():
                    refuse(top)
                done = True
            else:
                authority.shape.append("\0")
        if not done and authority.ended():
            done = True
    for output in tree.find_all(nodes.Output):
        output.nodes = [
            child if isinstance(child, nodes.TemplateData) or _env_only(child)
            else nodes.Filter(child, "url_component", [], [], None, None, lineno=child.lineno)
            for child in output.nodes
        ]


class ToolUrl(ToolTemplate):
    """A tool URL: literal text and ``env.*`` as written, every other value encoded (SPEC §9).

    A value from the conversation (``slots``, ``results``, ``call``, ``args``...) is
    percent-encoded as one component, so it cannot add ``/``, ``?``, ``#`` or ``&``; one that
    stands before the end of the authority (scheme, host, port) is a load error.
    """

    __slots__ = ()

    def __init__(self, text: str) -> None:
        self.text = text
        self._template = None
        self._paths = ()
        self.slot_refs = frozenset()
        self.roots = frozenset()
        if is_literal(text):
            return
        tree, (self.slot_refs, self.roots, self._paths) = parse(_URL_ENV, text, "tool url")
        _wrap_url_values(tree, text)
        self._template = compile_template(_URL_ENV, tree)

    def render(self, scope: Mapping[str, Any]) -> str:
        try:
            return super().render(scope)
        except TemplateRefusal as exc:
            if exc.message.startswith("template failed: _DotSegment: "):
                raise TemplateRefusal(exc.message.removeprefix("template failed: _DotSegment: ")
                                      + "; refused") from None
            raise


_TYPED = re.compile(r"\A\s*\{\{[-+]?(?P<expr>.*?)[-+]?\}\}\s*\Z", re.DOTALL)


class _TypedLeaf:
    """A body leaf that is exactly ``{{ expr }}``: renders to the value itself (an int stays an int)."""

    __slots__ = ("_expression", "_paths", "_text", "roots", "slot_refs")

    def __init__(self, text: str, inner: str) -> None:
        self._text = inner.strip()  # named in a refusal without the braces
        _, (self.slot_refs, self.roots, self._paths) = parse(_VALUE_ENV, text, "tool body")
        try:
            self._expression = _VALUE_ENV.compile_expression(inner, undefined_to_none=False)
            flatten_globals(self._expression._template)
        except TemplateSyntaxError as exc:  # also unknown filters
            raise TemplateError(f"template error in {text!r}: {exc.message}") from None

    def render(self, scope: Mapping[str, Any]) -> Any:
        try:
            value = self._expression(scope)
        except _Missing as exc:
            raise TemplateRefusal(_refusal(exc.undefined, self._paths, scope)) from None
        except Exception as exc:
            raise TemplateRefusal(f"template failed: {type(exc).__name__}: {exc}") from None
        if isinstance(value, Undefined):
            if value._undefined_obj is scope.get("slots"):
                return None  # an unset optional slot is sent as null
            raise TemplateRefusal(_refusal(value, self._paths, scope))  # a path inside a value
        try:
            return _json_copy(value, self._text)
        except RecursionError:  # data from a tool result can nest without limit
            raise TemplateRefusal(f"{self._text} is nested too deeply to send") from None


def _json_copy(value: Any, text: str) -> Any:
    """A fresh JSON-native copy of a leaf's value (the state's data is never handed out)."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
    elif isinstance(value, Mapping):
        if all(isinstance(k, str) for k in value):
            return {k: _json_copy(v, text) for k, v in value.items()}
    elif isinstance(value, list | tuple | types.GeneratorType):  # `| map(...)`, `| select(...)`
        return [_json_copy(v, text) for v in value]
    raise TemplateRefusal(f"{text} gives a {type(value).__name__}, not a JSON value")


_Build = Callable[[Mapping[str, Any]], Any]


class ToolBody:
    """A JSON structure with templated string leaves; ``render`` raises :class:`TemplateRefusal`."""

    __slots__ = ("_build", "roots", "slot_refs", "source")

    def __init__(self, source: Any) -> None:
        self.source = source
        refs: set[str] = set()
        roots: set[str] = set()
        try:
            self._build = _compile_body(source, refs, roots, "body")
        except RecursionError:
            raise TemplateError("tool body nested too deeply") from None
        self.slot_refs = frozenset(refs)
        self.roots = frozenset(roots)

    def render(self, scope: Mapping[str, Any]) -> Any:
        """A fresh JSON structure with every template leaf filled in."""
        return self._build(scope)

    def __repr__(self) -> str:
        return f"ToolBody({self.source!r})"


def _compile_body(value: Any, refs: set[str], roots: set[str], where: str) -> _Build:
    if isinstance(value, str):
        if is_literal(value):
            return lambda scope: value
        match = _TYPED.match(value)
        leaf: _TypedLeaf | ToolTemplate
        if match and "}}" not in match["expr"] and "{{" not in match["expr"]:
            leaf = _typed_leaf(value, match["expr"])
        else:
            leaf = _tool_template(value)
        refs.update(leaf.slot_refs)
        roots.update(leaf.roots)
        return leaf.render
    if isinstance(value, Mapping):
        items = [(k, _compile_body(v, refs, roots, f"{where}.{k}")) for k, v in value.items()]
        return lambda scope: {k: build(scope) for k, build in items}
    if isinstance(value, list | tuple):
        builds = [_compile_body(v, refs, roots, f"{where}[{i}]") for i, v in enumerate(value)]
        return lambda scope: [build(scope) for build in builds]
    if value is None or isinstance(value, bool | int | float):
        return lambda scope: value
    raise TemplateError(f"{where}: a tool body holds JSON values, got {type(value).__name__}")


def compile_tool_text(text: str) -> ToolTemplate:
    """Compile a strict tool template (url, header value); raises TemplateError.

    Shared by text, like speech templates (``templates.compile_speech``)."""
    return _tool_template(text)


@functools.lru_cache(maxsize=4096)
def _tool_template(text: str) -> ToolTemplate:
    return ToolTemplate(text)


@functools.lru_cache(maxsize=4096)
def compile_tool_url(text: str) -> ToolUrl:
    """Compile a tool URL (values encoded, authority from text and env only); raises TemplateError.

    Shared by text, like ``compile_tool_text``: a compiled URL is never mutated."""
    return ToolUrl(text)


@functools.lru_cache(maxsize=4096)
def _typed_leaf(text: str, inner: str) -> _TypedLeaf:
    return _TypedLeaf(text, inner)


def compile_tool_body(obj: Any) -> ToolBody:
    """Compile a tool body (any JSON structure; typed ``{{ expr }}`` leaves); raises TemplateError."""
    return ToolBody(obj)
