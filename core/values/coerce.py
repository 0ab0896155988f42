"""Slot value coercion (SPEC §4.1): raw Director output → the JSON-native stored form, or a refusal.

superdialog dropped a value that did not fit without a word; here every misfit raises
``ValueRefused`` whose message starts with the slot key and ends with what to ask the caller
("day: that day is in the past; ask for a day from today on"), so the runtime can log a
``slot_refused`` event and the Talker can act on it. Messages are second person, aimed at the
next question, and never show patterns or example values.

Parsing uses well-kept libraries (``dateparser``, ``phonenumbers``, ``email_validator``). They
are imported lazily so ``import superdialog_core`` stays fast; ``warm_up()`` loads them at start.

This module is the public face: dates and times live in :mod:`.dates`, phone numbers in
:mod:`.phones`, and ``ValueContext``/``ValueRefused`` in :mod:`.value_context`; import them all
from here.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Callable
from datetime import datetime
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

from .context import SlotTypeSpec, ValueContext, ValueRefused, collapse, short_text, text_of_number
from .dates import coerce_date, coerce_datetime, coerce_time, dateparse
from .phones import coerce_phone, phone_region_of

log = logging.getLogger(__name__)

STR_MAX = 500  # stored text is capped: a slot is a value, not a transcript
ENUM_LISTED = 12  # at most this many choices are named in a refusal
CONTAINER_DEPTH = 8  # an array or object slot nests at most this deep...
CONTAINER_ITEMS = 200  # ...and holds at most this many values in all, no text over STR_MAX


def coerce(key: str, spec: SlotTypeSpec, raw: Any, ctx: ValueContext) -> Any:
    """Return ``raw`` in the stored form of ``spec.type``; raise ``ValueRefused`` if it does not fit."""
    if raw is None:
        raise ValueRefused(key, "no value was given; ask the caller for it")
    return _COERCERS[spec.type](key, spec, raw, ctx)


def warm_up(language: str = "en") -> None:
    """Load the parsers and pay dateparser's slow first parse now, not in the first turn."""
    import email_validator  # noqa: F401
    import phonenumbers

    phonenumbers.parse("+49 30 1234567", None)
    ctx = ValueContext(now=datetime.now(ZoneInfo("UTC")), timezone="UTC", language=language)
    dateparse("tomorrow at 8 pm", ctx, "DMY")
    from babel.numbers import parse_decimal

    for locale in _number_locales(language):  # Babel's locale data, for grouped digits
        parse_decimal("1", locale=locale)


# --- scalar types ----------------------------------------------------------------------------


def _str(key: str, spec: SlotTypeSpec, raw: Any, ctx: ValueContext) -> str:
    if isinstance(raw, bool):
        text = "yes" if raw else "no"
    elif isinstance(raw, (int, float)):
        text = text_of_number(key, raw)
    elif isinstance(raw, str):
        text = collapse(raw)
    else:
        raise ValueRefused(key, "that is a list or a record, not a short text; ask the caller for it again")
    # "null" is a model placeholder, never a caller's answer; "" is one only where allowed
    if text.casefold() == "null" or (not text and not spec.allow_empty):
        raise ValueRefused(key, "nothing was given for it; ask the caller for it again")
    return text[:STR_MAX].rstrip()


@lru_cache(maxsize=16)
def _number_locales(language: str) -> tuple[str, ...]:
    """English (how a model writes numbers) plus the call's locale, when Babel knows it."""
    from babel import Locale, UnknownLocaleError

    name = language.replace("-", "_")
    try:
        Locale.parse(name)
    except (UnknownLocaleError, ValueError):
        log.warning("Babel does not know locale %r; numbers are read as English", language)
        return ("en",)
    return ("en",) if name.split("_")[0].lower() == "en" else ("en", name)


def _decimal(key: str, text: str, language: str) -> float | None:
    """Read digits as a number, refusing text that reads differently in English and the call's locale."""
    readings: set[float] = set()
    try:
        number = float(text)
    except ValueError:
        number = None
    if number is not None:
        # float() also reads "nan", "inf" and "1_0"; none of those is a number a caller said
        if not math.isfinite(number) or "_" in text:
            return None
        readings.add(number)
    locales = _number_locales(language)
    if not any(ch.isdigit() for ch in text) or (readings and locales == ("en",)):
        return readings.pop() if readings else None
    from babel.numbers import NumberFormatError, parse_decimal

    for locale in locales:
        try:
            readings.add(float(parse_decimal(text, locale=locale, strict=True)))
        except (NumberFormatError, ValueError):
            continue
    if len(readings) > 1:  # "1,000" is a thousand in English and one in German: ask
        raise ValueRefused(key, "that could mean more than one number; ask the caller for it again")
    return readings.pop() if readings else None


def _number(key: str, raw: Any, ctx: ValueContext, noun: str) -> float:
    if isinstance(raw, bool):
        raise ValueRefused(key, f"that is a yes or no, not {noun}; ask the caller for the number")
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        if isinstance(raw, float) and not math.isfinite(raw):
            raise ValueRefused(key, "that is not a finite number; ask the caller for it again")
        return raw
    text = short_text(key, raw, noun, "ask the caller for the number again")
    number = _decimal(key, text, ctx.language)
    if number is None:
        if not any(ch.isdigit() for ch in text):
            raise ValueRefused(
                key, f"that was sent in words, not as {noun} in digits; ask the caller for the number again"
            )
        raise ValueRefused(key, f"that is not {noun}; ask the caller for the number again")
    return number


def _int(key: str, spec: SlotTypeSpec, raw: Any, ctx: ValueContext) -> int:
    number = _number(key, raw, ctx, "a whole number")
    if isinstance(number, int):
        return number
    if not number.is_integer():
        raise ValueRefused(key, "that is not a whole number; ask the caller for a whole number")
    return int(number)


def _float(key: str, spec: SlotTypeSpec, raw: Any, ctx: ValueContext) -> float:
    return float(_number(key, raw, ctx, "a number"))


_TRUE = frozenset({"true", "yes", "1"})
_FALSE = frozenset({"false", "no", "0"})


def _bool(key: str, spec: SlotTypeSpec, raw: Any, ctx: ValueContext) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, (int, float)) and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, str):
        word = raw.strip().casefold()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
    raise ValueRefused(key, "that is not a yes or no answer; ask the caller whether it is yes or no")


def _enum_norm(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, (str, int, float)):
        return collapse(str(value)).casefold()
    return None


def _enum(key: str, spec: SlotTypeSpec, raw: Any, ctx: ValueContext) -> Any:
    choices = spec.values or []
    if not choices:
        raise ValueRefused(key, "no choices are declared for this slot; ask the caller in their own words")
    for choice in choices:  # an exact match wins over a loose one ("A" and "a" both declared)
        if type(choice) is type(raw) and choice == raw:
            return choice
    wanted = _enum_norm(raw)
    if wanted is not None:
        for choice in choices:
            if _enum_norm(choice) == wanted:
                return choice
    named = ", ".join(str(c) for c in choices[:ENUM_LISTED])
    if len(choices) > ENUM_LISTED:
        named += ", …"
    raise ValueRefused(
        key, f"that is not one of the choices ({named}); ask the caller which of these they want"
    )


# --- containers ------------------------------------------------------------------------------


def _container(key: str, raw: Any, kind: type, noun: str) -> Any:
    if isinstance(raw, str):
        # not JSON text (or absurdly deep): refused below like any other misfit
        with contextlib.suppress(ValueError, RecursionError):
            raw = json.loads(raw)
    if kind is list and isinstance(raw, tuple):
        raw = list(raw)
    if not isinstance(raw, kind):
        raise ValueRefused(key, f"that is not {noun}; ask the caller for it again")
    _check_size(key, raw, noun)
    return raw


def _check_size(key: str, value: Any, noun: str) -> None:
    """Refuse a list or record too deep or too big for one slot (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        too_long = isinstance(node, str) and len(node) > STR_MAX
        if depth > CONTAINER_DEPTH or count > CONTAINER_ITEMS or too_long:
            raise ValueRefused(
                key, f"that is too large to keep as {noun}; ask the caller for the main details only"
            )
        if isinstance(node, dict):
            stack.extend((item, depth + 1) for item in node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend((item, depth + 1) for item in node)


def _array(key: str, spec: SlotTypeSpec, raw: Any, ctx: ValueContext) -> list[Any]:
    return _container(key, raw, list, "a list of items")


def _object(key: str, spec: SlotTypeSpec, raw: Any, ctx: ValueContext) -> dict[str, Any]:
    value = _container(key, raw, dict, "a set of named details")
    if not all(isinstance(k, str) for k in value):
        raise ValueRefused(key, "those details are not named; ask the caller for them again")
    return value


# --- email -----------------------------------------------------------------------------------


def _email(key: str, spec: SlotTypeSpec, raw: Any, ctx: ValueContext) -> str:
    ask = "ask the caller to spell the address again"
    text = _spoken_email(short_text(key, raw, "an email address", ask)).replace(" ", "")
    from email_validator import EmailNotValidError, validate_email

    try:
        return validate_email(text, check_deliverability=False).normalized
    except EmailNotValidError as exc:
        why = str(exc).rstrip(".")
        why = why[:1].lower() + why[1:]
        raise ValueRefused(key, f"that is not a valid email address ({why}); {ask}") from exc


_SPOKEN_EMAIL = (("at", "@"), ("dot", "."), ("underscore", "_"), ("dash", "-"), ("hyphen", "-"))


def _spoken_email(text: str) -> str:
    """ "j dot smith at gmail dot com" → "j.smith@gmail.com": an address as the caller said it.

    Only for text without an "@": a written address is never rewritten.
    """
    if "@" in text:
        return text
    words = text.split()
    if "at" not in (w.casefold() for w in words):
        return text
    names = dict(_SPOKEN_EMAIL)
    return "".join(names.get(w.casefold(), w) for w in words)


_COERCERS: dict[str, Callable[[str, Any, Any, ValueContext], Any]] = {
    "str": _str,
    "int": _int,
    "float": _float,
    "bool": _bool,
    "enum": _enum,
    "date": coerce_date,
    "time": coerce_time,
    "datetime": coerce_datetime,
    "phone": coerce_phone,
    "email": _email,
    "array": _array,
    "object": _object,
}

__all__ = ["ValueContext", "ValueRefused", "coerce", "phone_region_of", "warm_up"]
