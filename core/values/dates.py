"""Dates, times and datetimes for slot coercion (SPEC §4.1), resolved against the call's anchor.

ISO text is read directly. Anything else falls back to ``dateparser`` against the call's
``now`` in its own zone, under every day/month/year order: a reading is kept only when all
orders agree, so an ambiguous answer is refused with a question, never guessed. Known
``dateparser`` slips are corrected before or after it reads ("a week from today" read as a
week ago, today's date by name moved a year on, a bare clock time moved to a wrong day).
"""

from __future__ import annotations

import logging
import re
from datetime import date, datetime, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

from .context import SlotTypeSpec, ValueContext, ValueRefused, short_text, zone

log = logging.getLogger(__name__)

_ORDERS = ("DMY", "MDY", "YMD")  # without a region, a reading must agree under every order
# Where the day/month order of "03/12" is month first or year first (CLDR short date forms);
# everywhere else it is day first. Canada writes both, so it stays ambiguous.
_MONTH_FIRST = frozenset({"US", "PR", "GU", "VI", "AS", "MP", "UM", "PH", "FM", "MH", "PW"})
_YEAR_FIRST = frozenset({"CN", "JP", "KR", "KP", "TW", "HU", "LT", "MN", "IR"})
_BOTH = frozenset({"CA"})


def region_order(region: str | None) -> str | None:
    """The day/month/year order numeric dates are read in for a region, or None (unknown)."""
    if not region or region.upper() in _BOTH:
        return None
    region = region.upper()
    if region in _MONTH_FIRST:
        return "MDY"
    return "YMD" if region in _YEAR_FIRST else "DMY"


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


_UNITS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth"]
_ORDINALS: dict[str, int] = {
    **{word: n for n, word in enumerate(_UNITS, 1)},
    **{w: n for n, w in enumerate(["tenth", "eleventh", "twelfth", "thirteenth", "fourteenth",
                                  "fifteenth", "sixteenth", "seventeenth", "eighteenth",
                                  "nineteenth"], 10)},
    "twentieth": 20, "thirtieth": 30,
    **{f"twenty{sep}{w}": 20 + n for n, w in enumerate(_UNITS, 1) for sep in (" ", "-")},
    **{f"thirty{sep}first": 31 for sep in (" ", "-")},
}
_MONTH = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
          r"sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)")
_WORD = "(" + "|".join(sorted(map(re.escape, _ORDINALS), key=len, reverse=True)) + ")"
# Only an ordinal next to a month is a day of the month ("the second of May", "May the
# second"); "in a second" or "the second Tuesday" are left for dateparser as they are.
_ORDINAL_DAY = re.compile(rf"\b{_WORD}(?=\s+(?:of\s+)?{_MONTH}\b)", re.I)
_ORDINAL_AFTER_MONTH = re.compile(rf"\b({_MONTH}\s+(?:the\s+)?){_WORD}\b", re.I)


def _nth(word: str) -> str:
    n = _ORDINALS[word.lower()]
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _digit_ordinals(text: str) -> str:
    """"the fourth of December" → "the 4th of December": dateparser reads a day of the month
    only in digits (English; other languages are passed on unchanged)."""
    text = _ORDINAL_DAY.sub(lambda m: _nth(m.group(1)), text)
    return _ORDINAL_AFTER_MONTH.sub(lambda m: m.group(1) + _nth(m.group(2)), text)


def dateparse(
    text: str, ctx: ValueContext, order: str, prefer: str = "future"
) -> tuple[datetime | None, str]:
    if ctx.language.lower().startswith("en"):
        text = _digit_ordinals(text)
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
    local = region_order(ctx.phone_region)
    if local is not None:
        # The call's region says how "12/07/1951" reads (SPEC §4.1): day first in GB; a
        # leading four-digit year reads year first anywhere
        orders = ("YMD",) if re.match(r"\d{4}\D", phrase) else (local,)
    readings = [dateparse(phrase, ctx, order) for order in orders]
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
        bare, _ = dateparse(phrase, ctx, orders[0], "current_period")
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


_BARE_DAY = re.compile(r"(?:on\s+)?(?:the\s+)?(\d{1,2})(?:st|nd|rd|th)?", re.IGNORECASE)


def _bare_day_ahead(text: str, day: date, today: date) -> date:
    """ "the 2nd" said on 30 November means 2 December: dateparser keeps the current month
    even when that day has passed (its future preference does not cover a bare day)."""
    if day >= today or _BARE_DAY.fullmatch(text.strip()) is None:
        return day
    year, month = (today.year + 1, 1) if today.month == 12 else (today.year, today.month + 1)
    try:
        return day.replace(year=year, month=month)
    except ValueError:  # the 31st in a 30-day month: not a day that exists next month
        return day


def _iso_date(text: str) -> date | None:
    if len(text) == 10 and text[4] == "-" and text[7] == "-":
        return date.fromisoformat(text)  # ValueError for a day that does not exist
    return None


def coerce_date(key: str, spec: SlotTypeSpec, raw: Any, ctx: ValueContext) -> str:
    ask = "ask the caller which day they mean"
    text = short_text(key, raw, "a day", ask)
    try:
        day = _iso_date(text)
    except ValueError as exc:
        raise ValueRefused(key, f"that day does not exist in the calendar; {ask}") from exc
    if day is None:
        when, period = _consensus(key, text, ctx, ask)
        if period not in ("day", "time"):
            raise ValueRefused(key, f"that is not one exact day; {ask}")
        day = _bare_day_ahead(text, when.date(), ctx.local_now.date())
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


def coerce_time(key: str, spec: SlotTypeSpec, raw: Any, ctx: ValueContext) -> str:
    ask = "ask the caller what time they mean"
    text = short_text(key, raw, "a time", ask)
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
    local = zone(ctx.timezone)
    aware = naive.replace(tzinfo=local)
    if aware.astimezone(ZoneInfo("UTC")).astimezone(local).replace(tzinfo=None) != naive:
        raise ValueRefused(
            key,
            "that time does not exist on that day because the clocks change; "
            "ask the caller for another time",
        )
    return aware


def coerce_datetime(key: str, spec: SlotTypeSpec, raw: Any, ctx: ValueContext) -> str:
    ask = "ask the caller for the day and the time"
    text = short_text(key, raw, "a day and time", ask)
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
    when = _localize(key, when, ctx) if when.tzinfo is None else when.astimezone(zone(ctx.timezone))
    if spec.future_only and when < ctx.now - timedelta(minutes=1):
        raise ValueRefused(key, "that time is in the past; ask for a time from now on")
    return when.replace(microsecond=0).isoformat()
