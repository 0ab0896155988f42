"""Spoken forms for template filters (SPEC §16): dates, times and digit strings as a TTS should say them.

Values that are not there (``None``, a Jinja undefined) pass through unchanged, so
``{{ slots.day | spoken_date | default('that day') }}`` still works; values that cannot be
parsed are returned unchanged rather than dropped (the caller still hears something).
"""

from __future__ import annotations

import re
from datetime import date, datetime, time
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from babel import Locale

__all__ = ["spoken_date", "spoken_digits", "spoken_time"]

# CLDR puts narrow/no-break spaces before AM/PM; some TTS engines read them oddly.
_SPACES = str.maketrans({"\u202f": " ", "\u00a0": " "})
# Separators an author or caller types inside a number; they mark groups, they are not spoken.
_SEPARATORS = re.compile(r"[\s\-./()]+")


@lru_cache(maxsize=64)
def _locale(language: str) -> Locale:
    # Babel is imported on first use: importing the engine must stay cheap (SPEC §14).
    from babel import Locale, UnknownLocaleError

    try:
        return Locale.parse(language.replace("-", "_"))
    except (UnknownLocaleError, ValueError, TypeError):
        raise ValueError(
            f"unknown language {language!r} for a spoken form; use a code such as 'en' or 'de_DE'"
        ) from None


@lru_cache(maxsize=64)
def _date_pattern(language: str) -> str:
    """The locale's own order for weekday, month name and day ("EEEE, MMMM d" in English)."""
    from babel.dates import match_skeleton

    locale = _locale(language)
    skeleton = match_skeleton("MMMMEEEEd", locale.datetime_skeletons) or "MMMMEd"
    pattern = str(locale.datetime_skeletons[skeleton].pattern)
    # Skeletons give an abbreviated weekday ("Tue"); a voice says it in full. Quoted text stays.
    return re.sub(r"('[^']*')|E+|c+", lambda m: m.group(1) or "EEEE", pattern)


def _absent(value: Any) -> bool:
    # Jinja's Undefined (and subclasses) is recognised by duck type to keep this module Jinja-free.
    return value is None or type(value).__name__.endswith("Undefined")


def spoken_date(value: Any, language: str = "en") -> Any:
    """ISO date (or date/datetime) → "Tuesday, December 1" in ``language``; else unchanged."""
    day = None if _absent(value) else _moment(value, date)
    return value if day is None else _format_date(day, language)


def spoken_time(value: Any, language: str = "en") -> Any:
    """ "14:30" (or a time/datetime) → "2:30 PM" in English, the locale's short time elsewhere."""
    moment = None if _absent(value) else _moment(value, time)
    return value if moment is None else _format_time(moment, language)


def _moment(value: Any, want: type[date] | type[time]) -> Any:
    """The day or the wall-clock time (naive) in ``value``: an object or ISO text; else None."""
    if isinstance(value, str):
        text = value.strip()
        try:
            return want.fromisoformat(text)  # "2026-12-01" or "14:30"
        except ValueError:
            pass
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            return None
    if isinstance(value, datetime):  # before `date`: a datetime is a date too
        return value.date() if want is date else value.time()
    if isinstance(value, want):
        # format_time would convert an aware time to UTC; speak the wall clock that was written
        return value.replace(tzinfo=None) if isinstance(value, time) else value
    return None


# Babel formats a pattern in tens of microseconds; a call speaks the same few days again and
# again (guidance is rendered for every Talker view), so each value is formatted once.
@lru_cache(maxsize=1024)
def _format_date(day: date, language: str) -> str:
    from babel.dates import format_date

    text = format_date(day, format=_date_pattern(language), locale=_locale(language))
    return text.translate(_SPACES)


@lru_cache(maxsize=1024)
def _format_time(wall: time, language: str) -> str:
    from babel.dates import format_time

    return format_time(wall, format="short", locale=_locale(language)).translate(_SPACES)


def spoken_digits(value: Any) -> Any:
    """Spell a phone number or reference one character at a time, in groups.

    "+49 30 123456" → "plus 4 9, 3 0, 1 2 3, 4 5 6". Grouping: the separators the value already
    has (spaces, dashes, dots, slashes, brackets) mark groups; a run longer than four characters
    is cut into threes, and a lone last character joins the group before it (3-3-4, never
    3-3-3-1), the way people read numbers aloud. Letters are kept (upper-cased, "ab12" → "A B 1
    2") so a TTS engine says them one by one; a leading "+" is said "plus". Commas make the
    pauses between groups.
    """
    if _absent(value):
        return value
    text = str(value).strip()
    if not text:
        return text
    prefix = ""
    if text.startswith("+"):
        prefix, text = "plus ", text[1:]
    groups: list[str] = []
    for run in _SEPARATORS.split(text):
        if run:
            groups.extend(_cut(run))
    spoken = ", ".join(" ".join(group.upper()) for group in groups)
    return (prefix + spoken).strip()


def _cut(run: str) -> list[str]:
    if len(run) <= 4:
        return [run]
    pieces = [run[i : i + 3] for i in range(0, len(run), 3)]
    if len(pieces[-1]) == 1:  # 3-3-3-1 → 3-3-4
        pieces[-2:] = [pieces[-2] + pieces[-1]]
    return pieces
