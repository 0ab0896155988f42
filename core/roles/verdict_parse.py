"""Finding the verdict object in a Director's answer, in time linear in its length (SPEC §7, §13).

``parse_verdict`` accepts tool-call arguments (a dict), a JSON string, a fenced block or prose
around one JSON object, and returns a dict with every field present. It raises
``VerdictError`` (the runtime retries once with the error) when there is no usable object:

- an answer over the size cap (default 64 KiB) is ``VerdictTooLarge``, before any parsing;
- the object is looked for in one pass: balanced ``{...}`` spans are found by a scanner that
  tracks strings, then decoded outermost first with a budget of a few times the answer's
  length, so neither 80 KB of ``{`` nor deep nesting costs more than a linear amount of work
  (``json.JSONDecoder.raw_decode`` at every ``{`` was quadratic: each failure computes its
  line number from the start of the text);
- nesting deeper than 32 levels, integers over 64 digits and strings over 64 KiB are
  parse errors, never a ``RecursionError``/``ValueError`` escaping the retry;
- unpaired surrogates (``"\\ud800"`` escapes) are replaced with U+FFFD and counted, so the
  runtime logs the repair once.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from ..values.clean import MAX_INT_DIGITS, ValueTooLarge, clean_value, string_too_long

VERDICT_CAP = 64 * 1024
# Answers longer than this are parsed in a worker thread (SPEC §13: off the event loop).
OFF_LOOP_BYTES = 4 * 1024
_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)
_WORK_FACTOR = 4  # characters decoded while searching, per character of the answer


class VerdictError(ValueError):
    """The Director's output holds no verdict object. ``detail`` says what was wrong."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(detail)


class VerdictTooLarge(VerdictError):
    """The answer is longer than the verdict cap; it was not parsed at all."""

    def __init__(self, size: int, cap: int) -> None:
        self.size = size
        self.cap = cap
        super().__init__(
            f"the answer is {size} bytes, over the {cap}-byte verdict cap "
            "(policies.caps.verdict_bytes); answer with one short JSON object")


class _IntTooLong(ValueError):
    pass


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _IntTooLong(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _loads(text: str) -> Any:
    """``json.loads`` whose failures are all ``VerdictError`` or ``json.JSONDecodeError``."""
    try:
        # strict=False: a raw newline or tab inside a string (small models write them) is read
        # as itself instead of costing the turn a retry; the text is cleaned where it is used.
        return json.loads(text, parse_int=_bounded_int, strict=False)
    except _IntTooLong as exc:
        raise VerdictError(f"the verdict holds {exc}; write numbers as short values") from None
    except RecursionError:
        raise VerdictError("the verdict is nested too deeply; answer with a flat object") from None


def balanced_spans(text: str) -> list[tuple[int, int]]:
    """Every balanced ``{...}`` span outside JSON strings, ordered by start (outer first).

    One pass: a ``"`` inside braces starts a string (backslash escapes honoured), so braces in
    string values do not count; unclosed braces are skipped over and the spans inside them stay.
    """
    spans: list[tuple[int, int]] = []
    stack: list[int] = []
    index = 0
    length = len(text)
    special = re.compile(r'[{}"]')
    string_end = re.compile(r'["\\]')
    while True:
        match = special.search(text, index)
        if match is None:
            break
        at = match.start()
        ch = text[at]
        index = at + 1
        if ch == "{":
            stack.append(at)
        elif ch == "}":
            if stack:
                spans.append((stack.pop(), index))
        elif stack:  # a string inside a candidate object: skip to its closing quote
            while True:
                end = string_end.search(text, index)
                if end is None:
                    index = length
                    break
                if text[end.start()] == "\\":
                    index = end.start() + 2
                    continue
                index = end.start() + 1
                break
    spans.sort()
    return spans


def _first_object(text: str) -> dict[str, Any] | None:
    """The first JSON object embedded in ``text``, with at most linear work."""
    if "}" not in text:
        return None
    budget = _WORK_FACTOR * len(text) + 1024
    for start, end in balanced_spans(text):
        size = end - start
        if size > budget:
            continue  # too big to try within the budget; an inner span may still fit
        budget -= size
        try:
            obj = _loads(text[start:end])
        except json.JSONDecodeError:
            continue
        except VerdictError:
            raise
        if isinstance(obj, dict):
            return obj
        if budget <= 0:
            break
    return None


def _decode(raw: str) -> Any:
    text = raw.strip()
    if not text:
        raise VerdictError("the Director returned empty text; answer with one JSON object")
    try:
        return _loads(text)
    except json.JSONDecodeError:
        pass
    for block in _FENCE.findall(text):
        try:
            return _loads(block.strip())
        except json.JSONDecodeError:
            continue
    obj = _first_object(text)
    if obj is None:
        raise VerdictError(
            f"no JSON object found in the Director's answer ({text[:80]!r}); answer with one "
            'JSON object such as {"slots": {}, "advance": null}'
        )
    return obj


def _unwrap_tool_call(obj: dict[str, Any]) -> dict[str, Any]:
    """Accept {"name": "record_verdict", "arguments": {...}} (some adapters pass the call)."""
    if set(obj) <= {"name", "arguments", "parameters", "type", "id"} and (
        "arguments" in obj or "parameters" in obj
    ):
        inner = obj.get("arguments", obj.get("parameters"))
        if isinstance(inner, str):
            inner = _decode(inner)
        if isinstance(inner, dict):
            return inner
    return obj


def answer_size(raw: Any) -> int:
    """The answer's size in bytes as the cap counts it (a dict: its JSON encoding)."""
    if isinstance(raw, str):
        return len(raw.encode("utf-8", "surrogatepass"))
    if isinstance(raw, (bytes, bytearray)):
        return len(raw)
    try:
        return len(msgspec.json.encode(raw))
    except (TypeError, ValueError, OverflowError, UnicodeEncodeError, RecursionError):
        return len(json.dumps(raw, default=str, ensure_ascii=True))


def parse_verdict_counted(
    raw: dict[str, Any] | str, *, cap: int = VERDICT_CAP
) -> tuple[dict[str, Any], int]:
    """``(verdict, replaced)``: ``parse_verdict``'s result and how many code points were repaired."""
    if isinstance(raw, (bytes, bytearray)):
        raw = bytes(raw).decode("utf-8", errors="replace")
    if isinstance(raw, str):
        too_long = string_too_long(raw, cap)
        if too_long is not None:
            raise VerdictTooLarge(too_long, cap)
        obj: Any = _decode(raw)
    else:
        obj = raw
    if not isinstance(obj, dict):
        raise VerdictError(
            f"the verdict must be a JSON object, got {type(obj).__name__}; answer with one "
            "object with the fields slots, spans, confirm, deny, advance, interrupt, note"
        )
    obj = _unwrap_tool_call(obj)
    try:
        obj, replaced = clean_value(obj, "verdict")
    except ValueTooLarge as exc:
        raise VerdictError(f"{exc.message}; answer with one short, flat JSON object") from None
    if not isinstance(raw, str):  # an adapter's dict: bounded now, so its size can be measured
        size = answer_size(obj)
        if size > cap:
            raise VerdictTooLarge(size, cap)
    verdict = dict(obj)
    for name in ("slots", "spans"):
        if verdict.get(name) is None:
            verdict[name] = {}
    for name in ("confirm", "deny"):
        if verdict.get(name) is None:
            verdict[name] = []
    for name in ("advance", "interrupt", "note"):
        value = verdict.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            verdict[name] = None
    return verdict, replaced


def parse_verdict(raw: dict[str, Any] | str, *, cap: int = VERDICT_CAP) -> dict[str, Any]:
    """A verdict dict with every field of SPEC §7 present (missing ones empty/None).

    Accepts a dict, a JSON string, a fenced ```json block, or text containing one JSON object.
    Raises ``VerdictError`` for anything without a usable JSON object (``VerdictTooLarge``
    over ``cap`` bytes). Wrong-typed fields are kept as they are, for ``apply_verdict`` to drop
    one by one; unknown fields are kept too.
    """
    return parse_verdict_counted(raw, cap=cap)[0]


__all__ = [
    "OFF_LOOP_BYTES",
    "VERDICT_CAP",
    "VerdictError",
    "VerdictTooLarge",
    "answer_size",
    "balanced_spans",
    "parse_verdict",
    "parse_verdict_counted",
]
