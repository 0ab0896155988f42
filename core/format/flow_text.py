"""Text-level mapping of legacy flows: templates, edge conditions, actions → tools, slot types.

Bare ``{{X}}`` becomes ``env.X`` (tool templates only: env never reaches speech), ``results.X``
(``.success`` → ``.ok``) or ``slots.X``; anything else is left out and reported in the coverage
list. Single-clause result conditions become expressions; other conditions stay prose.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .flow_schema import FlowAction, PropertySchema

_GLOSS = re.compile(r"\s+(—|--)\s+.*$")
_COND = [
    (re.compile(r"^(\w+)\.success\s*(?:==|=|is)\s*(true|false)$", re.IGNORECASE), "bool"),
    (re.compile(r"^not\s+(\w+)\.success$", re.IGNORECASE), "not"),
    (re.compile(r"^(\w+)\.status\s*==\s*([1-5]\d\d)$"), "status"),
]
_TEMPLATE_VAR = re.compile(r"\{\{\s*([A-Za-z_]\w*)((?:\.\w+)*)([^}]*)\}\}")
_ROOTS = {"slots", "results", "env", "call", "calls", "views"}
_TYPES = {"integer": "int", "number": "float", "boolean": "bool", "array": "array", "object": "object"}
_FORMATS = {"date": "date", "time": "time", "date-time": "datetime", "email": "email", "phone": "phone"}


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


class FlowText:
    """Rewrites the text of one flow; records what it could not map in ``coverage``."""

    def __init__(self, env_keys: set[str], results: set[str], slots: set[str], coverage: list[str]) -> None:
        self.env_keys = env_keys
        self.results = results
        self.slots = slots
        self.coverage = coverage

    def template(self, text: str, where: str, *, speech: bool) -> str:
        """Qualify bare ``{{X}}`` names; ``speech`` drops env reads (env never reaches a caller)."""

        def replace(match: re.Match[str]) -> str:
            root, rest, tail = match.group(1), match.group(2), match.group(3)
            if root in _ROOTS:
                return match.group(0)
            if root in self.env_keys and root not in self.slots:
                if speech:
                    self.coverage.append(f"{where}: reads env value {root!r}; env never reaches speech, left out")
                    return ""
                qualified = f"env.{root}{rest}"
            elif root in self.results:
                qualified = f"results.{root}{rest.replace('.success', '.ok')}"
            elif root in self.slots:
                qualified = f"slots.{root}{rest}"
            else:
                self.coverage.append(f"{where}: unknown template variable {root!r}, left out")
                return ""
            return "{{ " + qualified + tail.rstrip() + " }}"

        return _TEMPLATE_VAR.sub(replace, text)

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

    # --- nodes and edges ---------------------------------------------------------------

    def tool(self, action: FlowAction) -> dict[str, Any]:
        """The ToolSpec document of an action (1:1); a JSON-text body_template is parsed."""
        where = f"action {action.id!r}"
        tool: dict[str, Any] = {"id": action.id, "method": action.method,
                                "url": self.template(action.url, where, speech=False)}
        if action.headers:
            tool["headers"] = {k: self.template(v, where, speech=False) for k, v in action.headers.items()}
        body = action.body_template
        if isinstance(body, str):
            try:
                body = json.loads(body)
            except json.JSONDecodeError:
                self.coverage.append(f"{where}: body_template is not JSON with quoted templates; left out")
                body = None
        if body is not None:
            tool["body"] = self._body(body, where)
        for key in ("store_response_as", "env_updates", "slot_updates"):
            if getattr(action, key):
                tool[key] = getattr(action, key)
        if action.timeout != 30.0:
            tool["timeout"] = action.timeout
        return tool

    def _body(self, value: Any, where: str) -> Any:
        if isinstance(value, str):
            return self.template(value, where, speech=False)
        if isinstance(value, dict):
            return {k: self._body(v, where) for k, v in value.items()}
        if isinstance(value, list):
            return [self._body(v, where) for v in value]
        return value


__all__ = ["FlowText", "slot_spec"]
