"""Slot value coercion (SPEC §4.1): raw Director output → the JSON-native stored form, or a refusal.

superdialog dropped a value that did not fit without a word; here every misfit raises
``ValueRefused`` whose message starts with the slot key and ends with what to ask the caller
("day: that day is in the past; ask for a day from today on"), so the runtime can log a
``slot_refused`` event and the Talker can act on it. Messages are second person, aimed at the
next question, and never show patterns or example values.

Parsing uses well-kept libraries (``dateparser``, ``phonenumbers``, ``email_validator``). They
are imported lazily so ``import superdialog_core`` stays fast; ``warm_up()`` loads them at start.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

if TYPE_CHECKING:
    from .playbook import SlotSpec

log = logging.getLogger(__name__)

STR_MAX = 500  # stored text is capped: a slot is a value, not a transcript
PARSE_MAX = 120  # longest text handed to a parser; longer is not a date, time, number or phone
ENUM_LISTED = 12  # at most this many choices are named in a refusal


class ValueRefused(ValueError):
    """A value that does not fit its slot. ``message`` is ``"<key>: <reason>"``, worded for the model."""

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        self.message = f"{key}: {reason}"
        super().__init__(self.message)


@dataclass(frozen=True)
class ValueContext:
    """What coercion resolves against: the call's date anchor, its zone, phone region and language."""

    now: datetime
    timezone: str
    phone_region: str | None = None
    language: str = "en"

    def __post_init__(self) -> None:
        if self.now.tzinfo is None or self.now.utcoffset() is None:
            raise ValueError(
                "ValueContext.now must be timezone-aware; pass e.g. datetime.now(ZoneInfo(timezone))"
            )
        _zone(self.timezone)  # fail at construction, not on the first date a caller says
        if self.phone_region is not None:
            import phonenumbers

            region = self.phone_region.upper()
            if region not in phonenumbers.SUPPORTED_REGIONS:
                raise ValueError(
                    f"ValueContext.phone_region {self.phone_region!r} is not a known region; "
                    "use a two-letter ISO country code such as the caller's country"
                )
            object.__setattr__(self, "phone_region", region)

    @property
    def local_now(self) -> datetime:
        """``now`` in the call's zone (naive), the base that relative phrases resolve against."""
        return self.now.astimezone(_zone(self.timezone)).replace(tzinfo=None)


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(
            f"unknown timezone {name!r}; use an IANA name such as 'Europe/Berlin'"
        ) from exc


def coerce(key: str, spec: SlotSpec, raw: Any, ctx: ValueContext) -> Any:
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
    _dateparse("tomorrow at 8 pm", ctx, "DMY")
    from babel.numbers import parse_decimal

    for locale in _number_locales(language):  # Babel's locale data, for grouped digits
        parse_decimal("1", locale=locale)


# --- helpers ---------------------------------------------------------------------------------


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _text_of_number(key: str, raw: int | float) -> str:
    if isinstance(raw, float):
        if not math.isfinite(raw):
            raise ValueRefused(key, "that is not a finite number; ask the caller for it again")
        if raw.is_integer():
            return str(int(raw))
    return str(raw)


def _short_text(key: str, raw: Any, what: str, ask: str) -> str:
    """Text a parser may read: a collapsed string of bounded length (numbers become their text)."""
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise ValueRefused(key, f"that is not {what}; {ask}")
    text = _collapse(raw) if isinstance(raw, str) else _text_of_number(key, raw)
    if not text:
        raise ValueRefused(key, f"nothing was given for it; {ask}")
    if len(text) > PARSE_MAX:
        raise ValueRefused(key, f"that is too long to be {what}; {ask}")
    return text


# --- scalar types ----------------------------------------------------------------------------


def _str(key: str, spec: SlotSpec, raw: Any, ctx: ValueContext) -> str:
    if isinstance(raw, bool):
        text = "yes" if raw else "no"
    elif isinstance(raw, (int, float)):
        text = _text_of_number(key, raw)
    elif isinstance(raw, str):
        text = _collapse(raw)
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
    text = _short_text(key, raw, noun, "ask the caller for the number again")
    number = _decimal(key, text, ctx.language)
    if number is None:
        if not any(ch.isdigit() for ch in text):
            raise ValueRefused(
                key, f"that was sent in words, not as {noun} in digits; ask the caller for the number again"
            )
        raise ValueRefused(key, f"that is not {noun}; ask the caller for the number again")
    return number


def _int(key: str, spec: SlotSpec, raw: Any, ctx: ValueContext) -> int:
    number = _number(key, raw, ctx, "a whole number")
    if isinstance(number, int):
        return number
    if not number.is_integer():
        raise ValueRefused(key, "that is not a whole number; ask the caller for a whole number")
    return int(number)


def _float(key: str, spec: SlotSpec, raw: Any, ctx: ValueContext) -> float:
    return float(_number(key, raw, ctx, "a number"))


_TRUE = frozenset({"true", "yes", "1"})
_FALSE = frozenset({"false", "no", "0"})


def _bool(key: str, spec: SlotSpec, raw: Any, ctx: ValueContext) -> bool:
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
        return _collapse(str(value)).casefold()
    return None


def _enum(key: str, spec: SlotSpec, raw: Any, ctx: ValueContext) -> Any:
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
        # not JSON text: refused below with the same message as any other misfit
        with contextlib.suppress(ValueError):
            raw = json.loads(raw)
    if kind is list and isinstance(raw, tuple):
        raw = list(raw)
    if not isinstance(raw, kind):
        raise ValueRefused(key, f"that is not {noun}; ask the caller for it again")
    return raw


def _array(key: str, spec: SlotSpec, raw: Any, ctx: ValueContext) -> list[Any]:
    return _container(key, raw, list, "a list of items")


def _object(key: str, spec: SlotSpec, raw: Any, ctx: ValueContext) -> dict[str, Any]:
    value = _container(key, raw, dict, "a set of named details")
    if not all(isinstance(k, str) for k in value):
        raise ValueRefused(key, "those details are not named; ask the caller for them again")
    return value


# --- email -----------------------------------------------------------------------------------


def _email(key: str, spec: SlotSpec, raw: Any, ctx: ValueContext) -> str:
    ask = "ask the caller to spell the address again"
    text = _short_text(key, raw, "an email address", ask).replace(" ", "")
    from email_validator import EmailNotValidError, validate_email

    try:
        return validate_email(text, check_deliverability=False).normalized
    except EmailNotValidError as exc:
        why = str(exc).rstrip(".")
        why = why[:1].lower() + why[1:]
        raise ValueRefused(key, f"that is not a valid email address ({why}); {ask}") from exc


# --- dates and times -------------------------------------------------------------------------

_ORDERS = ("DMY", "MDY", "YMD")  # a reading is accepted only when every order agrees


@lru_cache(maxsize=16)
def _languages(language: str) -> tuple[str, ...]:
    from dateparser.data import languages_info

    primary = language.split("-")[0].split("_")[0].lower()
    if primary not in languages_info.language_order:
        log.warning("dateparser does not know language %r; dates are read as English", language)
        return ("en",)
    return (primary,) if primary == "en" else (primary, "en")


@lru_cache(maxsize=128)
def _parser(
    languages: tuple[str, ...], order: str, base: datetime, timezone: str, prefer: str = "future"
) -> Any:
    """One DateDataParser per (language, order, anchor): a call reuses its own for every turn."""
    from dateparser.date import DateDataParser

    return DateDataParser(
        languages=list(languages),
        settings={
            "RELATIVE_BASE": base,
            "PREFER_DATES_FROM": prefer,
            "RETURN_AS_TIMEZONE_AWARE": False,
            "RETURN_TIME_AS_PERIOD": True,
            "DATE_ORDER": order,
            "TIMEZONE": timezone,  # a zone in the text is converted to the call's zone
            "TO_TIMEZONE": timezone,
        },
    )


def _dateparse(
    text: str, ctx: ValueContext, order: str, prefer: str = "future"
) -> tuple[datetime | None, str]:
    parser = _parser(_languages(ctx.language), order, ctx.local_now, ctx.timezone, prefer)
    data = parser.get_date_data(text)
    return data.date_obj, data.period or "day"


def _consensus(key: str, text: str, ctx: ValueContext, ask: str) -> tuple[datetime, str]:
    """Parse under every day/month/year order and accept only an unambiguous reading.

    dateparser reads "11" or "03/12" differently per order, and spelled numbers ("four") as a
    month; any disagreement means the text could mean more than one thing, so it is refused
    rather than guessed. Relative phrases ("tomorrow", "next friday") agree and pass.
    """
    phrase = _offset_phrase(text)
    # Year-first only matters for all-digit forms; with a month name it reads "30 November" as
    # November 2030 and would make every such day look ambiguous.
    orders = _ORDERS if not any(ch.isalpha() for ch in phrase) else _ORDERS[:2]
    readings = [_dateparse(phrase, ctx, order) for order in orders]
    if any(when is None for when, _ in readings):
        raise ValueRefused(key, f"that is not a specific day or time; {ask}")
    if len(set(readings)) > 1:
        raise ValueRefused(key, f"that could mean more than one thing; {ask}")
    when, period = readings[0]
    assert when is not None  # checked above; narrows the type
    today = ctx.local_now.date()
    if period == "time" and when.date() != today:
        # A bare clock time ("8 pm") whose hour has passed: dateparser's future preference
        # moves it to a wrong day (at a month's end to the 1st of the same month). A bare
        # time means today; a past one is then refused by future_only, never guessed.
        bare, _ = _dateparse(phrase, ctx, orders[0], "current_period")
        if bare is not None and bare.date() == today:
            when = bare
    if (
        when.year == today.year + 1
        and (when.month, when.day) == (today.month, today.day)
        and str(when.year) not in text
    ):
        # "November 30" said on November 30: dateparser's future preference counts today's
        # midnight as past and moves a whole year on; the caller means today
        when = when.replace(year=today.year)
    return when, period


_NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
                 "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}  # fmt: skip
_FROM_TODAY = re.compile(
    r"(?P<in>in\s+)?(?P<n>\d{1,3}|[a-z]+)\s+(?P<unit>day|week)s?"
    r"(?P<from>\s+(?:from\s+(?:today|now)|today))?",
    re.IGNORECASE,
)


def _offset_phrase(text: str) -> str:
    """ "a week from today" → "in 7 days": dateparser reads "N units from today" as N units ago
    (or as today), and "in a week" as a whole week rather than one day ("next week" stays vague)."""
    match = _FROM_TODAY.fullmatch(text)
    if match is None or not (match["in"] or match["from"]):
        return text
    count = match["n"].lower()
    n = int(count) if count.isdigit() else _NUMBER_WORDS.get(count)
    if n is None:
        return text
    return f"in {n * 7 if match['unit'].lower() == 'week' else n} days"


def _iso_date(text: str) -> date | None:
    if len(text) == 10 and text[4] == "-" and text[7] == "-":
        return date.fromisoformat(text)  # ValueError for a day that does not exist
    return None


def _date(key: str, spec: SlotSpec, raw: Any, ctx: ValueContext) -> str:
    ask = "ask the caller which day they mean"
    text = _short_text(key, raw, "a day", ask)
    try:
        day = _iso_date(text)
    except ValueError as exc:
        raise ValueRefused(key, f"that day does not exist in the calendar; {ask}") from exc
    if day is None:
        when, period = _consensus(key, text, ctx, ask)
        if period not in ("day", "time"):
            raise ValueRefused(key, f"that is not one exact day; {ask}")
        day = when.date()
    if spec.future_only and day < ctx.local_now.date():
        raise ValueRefused(key, "that day is in the past; ask for a day from today on")
    return day.isoformat()


def _clock(text: str) -> tuple[int, int] | None:
    """``H``, ``H:MM`` or ``HH:MM`` (seconds allowed when zero); None for anything else."""
    parts = text.split(":")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() and p.isascii() for p in parts):
        return None
    if (len(parts) == 3 and int(parts[2]) != 0) or any(len(p) != 2 for p in parts[1:]):
        return None
    return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0


def _time(key: str, spec: SlotSpec, raw: Any, ctx: ValueContext) -> str:
    ask = "ask the caller what time they mean"
    text = _short_text(key, raw, "a time", ask)
    clock = _clock(text)
    if clock is not None:
        hour, minute = clock
        two_digit_hour = len(text.split(":")[0]) == 2 and ":" in text
        if 1 <= hour <= 12 and not two_digit_hour:
            # "9" or "9:30" said aloud could be morning or evening: ask, never guess
            raise ValueRefused(key, "that could be in the morning or the evening; ask the caller which")
        if hour > 23 or minute > 59:
            raise ValueRefused(key, f"that is not a time on the clock; {ask}")
        return f"{hour:02d}:{minute:02d}"
    when, period = _consensus(key, text, ctx, ask)
    if period != "time":
        raise ValueRefused(key, f"that is not an exact time; {ask}")
    return when.strftime("%H:%M")


def _localize(key: str, naive: datetime, ctx: ValueContext) -> datetime:
    zone = _zone(ctx.timezone)
    aware = naive.replace(tzinfo=zone)
    if aware.astimezone(ZoneInfo("UTC")).astimezone(zone).replace(tzinfo=None) != naive:
        raise ValueRefused(
            key,
            "that time does not exist on that day because the clocks change; "
            "ask the caller for another time",
        )
    return aware


def _datetime(key: str, spec: SlotSpec, raw: Any, ctx: ValueContext) -> str:
    ask = "ask the caller for the day and the time"
    text = _short_text(key, raw, "a day and time", ask)
    iso = text[:-1] + "+00:00" if text[-1:] in ("Z", "z") else text
    try:
        when = datetime.fromisoformat(iso) if len(iso) >= 16 and iso[4] == "-" else None
    except ValueError as exc:
        raise ValueRefused(key, f"that day or time does not exist; {ask}") from exc
    if when is None:
        parsed, period = _consensus(key, text, ctx, ask)
        if period != "time":
            raise ValueRefused(key, f"that has no exact time of day; {ask}")
        when = parsed
    # naive means the call's zone; an explicit offset is kept as an instant, shown in the call's zone
    when = _localize(key, when, ctx) if when.tzinfo is None else when.astimezone(_zone(ctx.timezone))
    if spec.future_only and when < ctx.now - timedelta(minutes=1):
        raise ValueRefused(key, "that time is in the past; ask for a time from now on")
    return when.replace(microsecond=0).isoformat()


# --- phone -----------------------------------------------------------------------------------

_PHONE_REASONS = {
    "TOO_SHORT": "that number is too short, a digit may be missing",
    "TOO_LONG": "that number is too long, a digit may have been misheard or said twice",
    "INVALID_LENGTH": "that number has the wrong number of digits",
    "INVALID_COUNTRY_CODE": "no country has that code",
}
_PHONE_ASK = "ask the caller to repeat the whole number"
_ASK_CODE = "ask the caller for the country code"


def _phone_reason(number: Any, *, national: bool) -> str:
    """Why a parsed number is not valid, worded as the next thing to ask."""
    import phonenumbers

    result = phonenumbers.is_possible_number_with_reason(number)
    if result == phonenumbers.ValidationResult.IS_POSSIBLE_LOCAL_ONLY:
        if national:
            return "that number is missing its area code; ask the caller for the area code"
        result = phonenumbers.ValidationResult.TOO_SHORT  # with a country code, digits are missing
    for name, reason in _PHONE_REASONS.items():
        if result == getattr(phonenumbers.ValidationResult, name):
            return f"{reason}; {_ASK_CODE if name == 'INVALID_COUNTRY_CODE' else _PHONE_ASK}"
    return f"that is not a number in use; {_PHONE_ASK}"


def _phone(key: str, spec: SlotSpec, raw: Any, ctx: ValueContext) -> str:
    import phonenumbers

    text = _short_text(key, raw, "a phone number", _PHONE_ASK)
    if text.startswith("00"):
        text = "+" + text[2:]  # the international prefix most callers say
    parse: Callable[[str, str | None], Any] = phonenumbers.parse
    if any(ch.isalpha() for ch in text):
        try:
            has_extension = bool(parse(text, ctx.phone_region or "ZZ").extension)
        except phonenumbers.NumberParseException:
            has_extension = False
        if has_extension:
            raise ValueRefused(key, "that has an extension; ask the caller for the number without it")
        raise ValueRefused(key, "that has letters in it; ask the caller to say the number digit by digit")
    if text.startswith("+"):
        try:
            number = parse(text, None)
        except phonenumbers.NumberParseException as exc:
            if exc.error_type == phonenumbers.NumberParseException.INVALID_COUNTRY_CODE:
                raise ValueRefused(key, f"no country has that code; {_ASK_CODE}") from exc
            raise ValueRefused(key, f"that is not a phone number; {_PHONE_ASK}") from exc
        if not phonenumbers.is_valid_number(number):
            raise ValueRefused(key, _phone_reason(number, national=False))
        return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)
    # No plus: keep it only if exactly one reading is a valid number (international or national)
    readings: dict[str, Any] = {}
    national = None
    candidates = [("+" + text, None)] + ([(text, ctx.phone_region)] if ctx.phone_region else [])
    for candidate, region in candidates:
        try:
            number = parse(candidate, region)
        except phonenumbers.NumberParseException:
            continue
        if region is not None:
            national = number
        if phonenumbers.is_valid_number(number):
            readings[phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)] = number
    if len(readings) == 1:
        return next(iter(readings))
    if len(readings) > 1:
        raise ValueRefused(key, f"that number could belong to more than one country; {_ASK_CODE}")
    if national is not None:
        raise ValueRefused(key, _phone_reason(national, national=True))
    digits = sum(ch.isdigit() for ch in text)
    if digits < 6:
        raise ValueRefused(key, f"that number is too short, a digit may be missing; {_PHONE_ASK}")
    raise ValueRefused(key, f"that number has no country code; {_ASK_CODE}")


def phone_region_of(number: str) -> str | None:
    """The region of an E.164 number (the caller's own), usable as ``ValueContext.phone_region``."""
    import phonenumbers

    try:
        parsed = phonenumbers.parse(number, None)
    except phonenumbers.NumberParseException:
        return None
    region = phonenumbers.region_code_for_number(parsed)
    return region if region and region != "001" else None


_COERCERS: dict[str, Callable[[str, Any, Any, ValueContext], Any]] = {
    "str": _str,
    "int": _int,
    "float": _float,
    "bool": _bool,
    "enum": _enum,
    "date": _date,
    "time": _time,
    "datetime": _datetime,
    "phone": _phone,
    "email": _email,
    "array": _array,
    "object": _object,
}

__all__ = ["ValueContext", "ValueRefused", "coerce", "phone_region_of", "warm_up"]
