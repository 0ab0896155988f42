"""Text-level mapping of legacy flows: template names, edge conditions, actions → tools, slot types.

Every head name in a template (``flow_names``) resolves, in superdialog's order: a flow env key
→ ``env.X`` in tool templates (in speech, an env key no tool template reads becomes a call-start
value whose default is the flow's literal; one that tools read too stays env, and its speech
reads render empty); an action's store key → ``results.X`` (``.success`` → ``.ok``); an
edge-schema property → ``slots.X``; ``current_date`` / ``current_time*`` → ``clock.date`` /
``clock.time``; any other name → a call-start value read as ``slots.X``. Single-clause result
conditions become expressions; other conditions stay prose. What each piece became, and what
did not map, is recorded in a ``Coverage``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from . import flow_names
from .flow_schema import FlowAction, PropertySchema

_GLOSS = re.compile(r"\s+(—|--)\s+.*$")
_COND = [
    (re.compile(r"^(\w+)\.success\s*(?:==|=|is)\s*(true|false)$", re.IGNORECASE), "bool"),
    (re.compile(r"^not\s+(\w+)\.success$", re.IGNORECASE), "not"),
    (re.compile(r"^(\w+)\.status\s*==\s*([1-5]\d\d)$"), "status"),
]
_TYPES = {"integer": "int", "number": "float", "boolean": "bool", "array": "array", "object": "object"}
_FORMATS = {"date": "date", "time": "time", "date-time": "datetime", "email": "email", "phone": "phone"}
_CLOCK = {"current_date": "clock.date", "current_time": "clock.time"}
_EXPR_BLOCK = re.compile(r"\{\{.*?\}\}", re.DOTALL)
_TOJSON = re.compile(r"\s*\|\s*tojson\s*(\}\})$")


def slot_spec(prop: PropertySchema) -> dict[str, Any]:
    """Our slot type for a JSON-schema property (enum, integer, date format...); optional."""
    spec: dict[str, Any] = {"type": "str"}
    if prop.enum:
        spec = {"type": "enum", "values": list(prop.enum)}
    elif prop.type in _TYPES:
        spec["type"] = _TYPES[prop.type]
    elif prop.format in _FORMATS:
        spec["type"] = _FORMATS[prop.format]
    if prop.description:
        spec["description"] = prop.description
    return spec


@dataclass(frozen=True)
class CoverageEntry:
    """What one node, edge or action of a legacy flow became.

    ``source`` names it as the author wrote it (``nodes.greet``, ``nodes.greet.edges.start``,
    ``global_edges.goodbye``, ``actions.lookup``); ``became`` is what it compiled to (None when
    nothing); ``mapped`` is False when its meaning is (partly) lost; ``note`` says how or why.
    """

    source: str
    became: str | None
    mapped: bool
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "became": self.became, "mapped": self.mapped, "note": self.note}


class Coverage:
    """Collects, per source, what it became and the notes; ``entries()`` in first-seen order."""

    def __init__(self) -> None:
        self._became: dict[str, list[str]] = {}
        self._notes: dict[str, list[str]] = {}
        self._gaps: set[str] = set()

    def became(self, source: str, what: str) -> None:
        items = self._became.setdefault(source, [])
        if what not in items:
            items.append(what)
        self._notes.setdefault(source, [])

    def note(self, source: str, text: str, *, gap: bool = False) -> None:
        self._became.setdefault(source, [])
        notes = self._notes.setdefault(source, [])
        if text not in notes:
            notes.append(text)
        if gap:
            self._gaps.add(source)

    def gap(self, source: str, text: str) -> None:
        self.note(source, text, gap=True)

    def entries(self) -> list[CoverageEntry]:
        out = []
        for source, became in self._became.items():
            notes = self._notes.get(source) or []
            out.append(CoverageEntry(source, "; ".join(became) or None,
                                     source not in self._gaps and bool(became), "; ".join(notes) or None))
        return out


class FlowText:
    """Rewrites the text of one flow, recording what it could not map in ``coverage``.

    ``env_keys``: the flow's env keys (and those its actions' ``env_updates`` write);
    ``speech_env``: the env keys that become call-start values (read in speech, in no tool).
    Unknown names become call-start values too; both are collected in ``call_start``.
    """

    def __init__(self, env_keys: set[str], results: set[str], slots: set[str], coverage: Coverage,
                 speech_env: set[str] | None = None) -> None:
        self.env_keys = env_keys
        self.results = results
        self.slots = slots
        self.coverage = coverage
        self.speech_env = speech_env or set()
        self.call_start: set[str] = set()
        self.clock_zones: set[str] = set()

    def _resolve(self, name: str, source: str, speech: bool) -> str:
        if name in self.env_keys:
            if speech and name in self.speech_env:
                self.call_start.add(name)
                return f"slots.{name}"
            if speech:
                self.coverage.gap(source, f"speech reads env value {name!r}, which tools read too; "
                                  "it stays env and renders empty in speech (env never reaches the caller)")
            return f"env.{name}"
        if name in self.results:
            return f"results.{name}"
        if name in self.slots:
            return f"slots.{name}"
        if name in _CLOCK:
            return _CLOCK[name]
        if name.startswith("current_time_"):
            self.clock_zones.add(name.removeprefix("current_time_").replace("_", "/", 1))
            return "clock.time"
        self.call_start.add(name)
        return f"slots.{name}"

    def template(self, text: str, source: str, *, speech: bool) -> str:
        """``text`` with every bare head name qualified (see the module docstring)."""
        rewritten = flow_names.rewrite(text, lambda name: self._resolve(name, source, speech))
        return text if rewritten is None else rewritten  # a syntax error is reported at load

    def condition(self, text: str) -> tuple[str, str]:
        """``(judge, when)``: an expr for the single-clause result forms, else llm prose."""
        clause = _GLOSS.sub("", text.strip())
        for pattern, form in _COND:
            match = pattern.match(clause)
            if match and match.group(1) in self.results:
                name = match.group(1)
                if form == "bool":
                    truth = match.group(2).lower() == "true"
                    return "expr", f"results.{name}.ok" if truth else f"results.{name}.ok == False"
                if form == "not":
                    return "expr", f"not results.{name}.ok"
                return "expr", f"results.{name}.status == {match.group(2)}"
        return "llm", text

    def failure_key(self, text: str) -> str | None:
        """``failed`` / ``http_NNN`` for a failure condition of a tool node's edge, else None."""
        judge, when = self.condition(text)
        if judge != "expr":
            return None
        if when.endswith("== False") or when.startswith("not "):
            return "failed"
        status = re.search(r"status == (\d+)$", when)
        return f"http_{status.group(1)}" if status else None

    # --- actions -----------------------------------------------------------------------

    def tool(self, action: FlowAction) -> dict[str, Any]:
        """The ToolSpec document of an action (1:1); a JSON-text body is parsed."""
        source = f"actions.{action.id}"
        tool: dict[str, Any] = {"id": action.id, "method": action.method,
                                "url": self.template(action.url, source, speech=False)}
        if action.headers:
            tool["headers"] = {k: self.template(v, source, speech=False) for k, v in action.headers.items()}
        body = action.body_template
        if isinstance(body, str):
            body = json_body(body)
            if body is None:
                self.coverage.gap(source, "body is neither JSON nor JSON with {{ }} values; left out")
        if body is not None:
            tool["body"] = self._body(body, source)
        for key in ("store_response_as", "env_updates", "slot_updates"):
            if getattr(action, key):
                tool[key] = getattr(action, key)
        if action.timeout != 30.0:
            tool["timeout"] = action.timeout
        self.coverage.became(source, f"tool {action.id}")
        return tool

    def _body(self, value: Any, source: str) -> Any:
        if isinstance(value, str):
            return self.template(value, source, speech=False)
        if isinstance(value, dict):
            return {k: self._body(v, source) for k, v in value.items()}
        if isinstance(value, list):
            return [self._body(v, source) for v in value]
        return value


def json_body(text: str) -> Any:
    """A body written as text: JSON, or JSON whose values are bare ``{{ expr|tojson }}``.

    superdialog renders such a body and parses the result; here each bare ``{{ }}`` becomes a
    leaf that is exactly that template (which keeps the value's native type, so a trailing
    ``|tojson`` is dropped). None when the text is neither."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    templates: list[str] = []
    out: list[str] = []
    pos = 0
    for match in _EXPR_BLOCK.finditer(text):
        before = text[pos:match.start()]
        out.append(before)
        if _inside_string("".join(out)):
            out.append(match.group(0))  # part of a JSON string: stays as text
        else:
            templates.append(_TOJSON.sub(r" \1", match.group(0)))
            out.append(json.dumps(f"\x00{len(templates) - 1}\x00"))
        pos = match.end()
    out.append(text[pos:])
    if not templates:
        return None
    try:
        parsed = json.loads("".join(out))
    except json.JSONDecodeError:
        return None

    def restore(value: Any) -> Any:
        if isinstance(value, str) and value.startswith("\x00") and value.endswith("\x00"):
            return templates[int(value.strip("\x00"))]
        if isinstance(value, dict):
            return {k: restore(v) for k, v in value.items()}
        if isinstance(value, list):
            return [restore(v) for v in value]
        return value

    return restore(parsed)


def _inside_string(prefix: str) -> bool:
    """True when ``prefix`` (JSON text) ends inside a string literal."""
    inside = escaped = False
    for char in prefix:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = inside
        elif char == '"':
            inside = not inside
    return inside


__all__ = ["Coverage", "CoverageEntry", "FlowText", "json_body", "slot_spec"]
