"""Valid text and bounded values where data enters the engine (SPEC §13).

Text reaches the engine from the caller (speech to text), the Director, tool responses and the
Talker. Python strings can hold unpaired surrogates (``"\\ud800"``, e.g. from a JSON escape),
which no UTF-8 encoder accepts: one of them in a logged event would stop the log from being
written. ``clean_text`` replaces them with U+FFFD (a correctly paired surrogate pair is joined
into the character it encodes) and says how many it replaced, so the boundary can log one
``degraded`` event.

Values that end up in events (slot values, verdicts, tool data, webhook payloads) are bounded:
nesting depth 32, strings 64 KiB (UTF-8), integers 64 digits, floats finite (no NaN or
Infinity, which JSON cannot hold). ``clean_value`` checks the
bounds and cleans every string in one walk; a value over a bound raises ``ValueTooLarge``
naming where and what the bound is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

MAX_DEPTH = 32
MAX_STRING_BYTES = 64 * 1024
MAX_INT_DIGITS = 64
REPLACEMENT = "\ufffd"


class ValueTooLarge(ValueError):
    """A value is over a bound. ``where`` is its path (``slots.name``, ``data.items[3]``)."""

    def __init__(self, where: str, message: str) -> None:
        self.where = where
        self.message = f"{where}: {message}"
        super().__init__(self.message)


def clean_text(text: str) -> tuple[str, int]:
    """``(text, replaced)``: ``text`` with unpaired surrogates replaced by U+FFFD.

    ``replaced`` is how many code points were replaced (0: the text is returned as it was).
    """
    if text.isascii():
        return text, 0
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        return text, 0
    # UTF-16 with surrogatepass keeps every surrogate as its code unit; decoding joins the
    # valid pairs and turns each lone one into U+FFFD.
    fixed = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return fixed, max(fixed.count(REPLACEMENT) - text.count(REPLACEMENT), 1)


def string_too_long(text: str, limit: int = MAX_STRING_BYTES) -> int | None:
    """The UTF-8 size of ``text`` when it is over ``limit`` bytes, else None (cheap when short)."""
    if len(text) * 4 <= limit:
        return None
    if len(text) > limit:
        return len(text.encode("utf-8", "surrogatepass"))
    size = len(text.encode("utf-8", "surrogatepass"))
    return size if size > limit else None


class _Walk:
    __slots__ = ("max_depth", "max_int", "max_string", "replaced")

    def __init__(self, max_depth: int, max_string: int, max_int_digits: int) -> None:
        self.max_depth = max_depth
        self.max_string = max_string
        self.max_int = 10**max_int_digits
        self.replaced = 0

    def value(self, value: Any, where: str, depth: int) -> Any:
        if isinstance(value, str):
            size = string_too_long(value, self.max_string)
            if size is not None:
                raise ValueTooLarge(
                    where, f"a string of {size} bytes is over the {self.max_string}-byte limit")
            fixed, count = clean_text(value)
            self.replaced += count
            return fixed
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, float):
            if math.isfinite(value):
                return value
            # JSON has no NaN or Infinity: the store would write null, and a state folded
            # from the stored log would differ from the live call's.
            raise ValueTooLarge(where, f"{value!r} is not a finite number (JSON cannot hold it)")
        if isinstance(value, int):
            if -self.max_int < value < self.max_int:
                return value
            # Counted without str(): Python refuses to print ints over 4,300 digits.
            digits = len(str(abs(value))) if value.bit_length() < 10_000 else (
                f"about {int(value.bit_length() * 0.30103) + 1}")
            raise ValueTooLarge(
                where, f"an integer of {digits} digits is over the "
                f"{len(str(self.max_int)) - 1}-digit limit")
        if isinstance(value, (Mapping, list, tuple)):
            if depth >= self.max_depth:
                raise ValueTooLarge(
                    where, f"nested deeper than {self.max_depth} levels; send a flatter value")
            if isinstance(value, Mapping):
                out: dict[Any, Any] = {}
                for key, item in value.items():
                    if isinstance(key, str):
                        key, count = clean_text(key)
                        self.replaced += count
                    out[key] = self.value(item, f"{where}.{key}", depth + 1)
                return out
            return [self.value(item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value)]
        return value  # not JSON data (a python tool's object): left to the encoder


def clean_value(
    value: Any,
    where: str = "value",
    *,
    max_depth: int = MAX_DEPTH,
    max_string_bytes: int = MAX_STRING_BYTES,
    max_int_digits: int = MAX_INT_DIGITS,
) -> tuple[Any, int]:
    """``(value, replaced)``: a copy with every string cleaned; raises ``ValueTooLarge``.

    Containers are copied (tuples become lists, as in JSON); other leaves are kept.
    """
    walk = _Walk(max_depth, max_string_bytes, max_int_digits)
    return walk.value(value, where, 0), walk.replaced


def replaced_detail(where: str, count: int) -> str:
    """The ``degraded`` detail of a repaired text (one event per repaired text)."""
    plural = "" if count == 1 else "s"
    return (f"invalid_unicode:{where}: replaced {count} unencodable code point{plural} "
            "(unpaired surrogate) with U+FFFD")


__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "MAX_STRING_BYTES",
    "ValueTooLarge",
    "clean_text",
    "clean_value",
    "replaced_detail",
    "string_too_long",
]
