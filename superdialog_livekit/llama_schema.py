"""JSON Schemas that llama.cpp's grammar converter enforces as written.

llama.cpp turns a ``response_format`` schema into a GBNF grammar, but it ignores ``enum`` (and
string bounds) when ``type`` is a list: ``{"type": ["string", "null"], "enum": ["a"]}`` let a
small model answer ``"1.0"``. ``llama_safe_schema`` rewrites every nullable type list into a
form it enforces:

* with ``enum``: ``{"enum": [..., null]}`` (the type is implied by the values);
* otherwise: ``{"anyOf": [{"type": "string", <the other keywords>}, {"type": "null"}]}``.

Two more things its converter gets wrong or slow are fixed on the way: ``\\d`` in a
``pattern`` becomes ``[0-9]`` (the converter wrote ``\\d`` as a literal, so a date pattern
forced the text ``\\d\\d\\d\\d``), and ``max_length`` (when given) caps every string's
``maxLength`` (each allowed character is one nested grammar rule). An array that may hold
no item becomes ``{"const": []}``: without ``items`` the converter ignored ``maxItems: 0``, and
a 135M model filled ``deny`` with made-up objects.

The input is never mutated (the Director's schemas are cached and shared).
"""

from __future__ import annotations

from typing import Any

__all__ = ["llama_safe_schema"]

# Keywords whose value is one subschema, a list of them, or a name → subschema mapping.
_ONE = ("items", "additionalProperties", "not", "contains", "if", "then", "else",
        "propertyNames", "unevaluatedProperties", "unevaluatedItems")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def _pattern(pattern: str) -> str:
    """``\\d`` spelled as a character class (``[0-9]``, or ``0-9`` inside a class)."""
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt == "d":
                out.append("0-9" if in_class else "[0-9]")
            else:
                out.append(ch + nxt)
            i += 2
            continue
        if ch == "[" and not in_class:
            in_class = True
        elif ch == "]" and in_class:
            in_class = False
        out.append(ch)
        i += 1
    return "".join(out)


def llama_safe_schema(schema: Any, *, max_length: int | None = None) -> Any:
    """A copy of ``schema`` that llama.cpp's grammar enforces as written.

    Nullable type lists become ``enum``/``anyOf``, ``\\d`` in patterns becomes ``[0-9]``, and
    with ``max_length`` no string may be longer (strings without a bound get it too).
    """
    if isinstance(schema, list):
        return [llama_safe_schema(item, max_length=max_length) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _ONE and isinstance(value, (dict, list)):
            out[key] = llama_safe_schema(value, max_length=max_length)
        elif key in _MANY and isinstance(value, list):
            out[key] = [llama_safe_schema(item, max_length=max_length) for item in value]
        elif key in _MAPS and isinstance(value, dict):
            out[key] = {name: llama_safe_schema(sub, max_length=max_length)
                        for name, sub in value.items()}
        elif key == "pattern" and isinstance(value, str):
            out[key] = _pattern(value)
        else:
            out[key] = value
    kinds = out.get("type")
    if kinds == "array" and out.get("maxItems") == 0:
        # The converter drops maxItems without items: [{"name": "John"}] passed for "no items".
        return {k: v for k, v in out.items() if k in ("title", "description")} | {"const": []}
    if max_length is not None and (kinds == "string" or (isinstance(kinds, list) and "string" in kinds)) \
            and "enum" not in out and "pattern" not in out:
        bound = out.get("maxLength")
        out["maxLength"] = max_length if not isinstance(bound, int) else min(bound, max_length)
    kinds = out.get("type")
    if not isinstance(kinds, list):
        return out
    if len(kinds) == 1:
        out["type"] = kinds[0]
        return out
    if "enum" in out:
        # The values carry the types; null is allowed only if the type list allowed it.
        out.pop("type")
        values = list(out["enum"])
        if "null" in kinds and None not in values:
            values.append(None)
        out["enum"] = values
        return out
    rest = {k: v for k, v in out.items() if k != "type"}
    branches: list[dict[str, Any]] = []
    for kind in kinds:
        branches.append({"type": "null"} if kind == "null" else {"type": kind, **rest})
    # Annotations stay on the outer schema; the constraints live in each typed branch.
    outer = {k: v for k, v in rest.items() if k in ("title", "description", "default")}
    return {**outer, "anyOf": branches}
