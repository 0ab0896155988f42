"""Is a Director's value in the caller's words? Placeholders and span evidence (SPEC §7).

A small model fills slots the caller never spoke to: "John Doe", "unknown", the receptionist's
own name, today's date. Two checks catch most of it without a model:

* ``placeholder_reason``: text that is a placeholder, not an answer ("unknown", "n/a", "not
  specified"; sample names such as "John Doe" unless the caller said them). Refused for every
  ``str`` slot.
* ``in_callers_words``: whether the value (or its span) can be found in what the caller said,
  after normalising case, spacing and spoken digits ("oh seven seven" is "077"), and for
  emails the spoken symbols ("j dot smith at gmail dot com"). Each slot's ``anchor`` decides
  what a miss does (``verdict.py``).

Pure text functions: no playbook, no log; the caller's turns are passed in.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Any

__all__ = ["CallerWords", "clock_said", "in_callers_words", "placeholder_reason", "span_said"]

# Said by models for "nothing stated", never a caller's answer to "what is your name?".
PLACEHOLDERS = frozenset({
    "unknown", "none", "n/a", "na", "n.a.", "null", "nil", "not specified", "unspecified",
    "not provided", "not given", "not stated", "not available", "no name", "tbd", "tba",
    "to be determined", "to be confirmed", "-", "--", "?", "...", "…", "undefined", "empty",
    "not applicable", "no answer", "refused", "declined", "anonymous", "redacted",
    "caller", "the caller", "customer", "the customer", "user", "patient", "the patient",
    "your name", "name", "first last", "firstname lastname", "full name",
})  # fmt: skip
# Sample values a model writes when it has none; fine only when the caller said them.
SAMPLE_VALUES = frozenset({
    "john doe", "jane doe", "john smith", "jane smith", "john", "jane", "doe", "test",
    "test user", "example", "sample", "foo", "bar", "foo bar", "lorem ipsum", "xyz", "abc",
    "user@example.com", "john.doe@example.com", "john@example.com", "example@example.com",
    "test@example.com", "123456", "1234567890", "0123456789", "555-1234",
})  # fmt: skip

_DIGIT_WORDS = {"zero": "0", "oh": "0", "o": "0", "nought": "0", "one": "1", "two": "2",
                "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7", "eight": "8",
                "nine": "9"}  # fmt: skip
_REPEAT = {"double": 2, "triple": 3}
_EMAIL_WORDS = {"at": "@", "dot": ".", "underscore": "_", "dash": "-", "hyphen": "-",
                "minus": "-", "plus": "+"}  # fmt: skip
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def _fold(text: str) -> str:
    """Casefolded, accents kept (a caller's "Weiß" must match the model's "Weiß")."""
    return unicodedata.normalize("NFC", text).casefold().replace("’", "'")


def _words(text: str) -> list[str]:
    return _WORD.findall(_fold(text))


def _spoken_digits(words: list[str]) -> str:
    """The digits a caller said, in order: "oh seven, double seven" → "0777"."""
    out: list[str] = []
    repeat = 1
    for word in words:
        if word in _REPEAT:
            repeat = _REPEAT[word]
            continue
        if word.isdigit():
            out.append(word[0] * (repeat - 1) + word)
        elif word in _DIGIT_WORDS:
            out.append(_DIGIT_WORDS[word] * repeat)
        repeat = 1
    return "".join(out)


class CallerWords:
    """What the caller said in the Director's window, in the forms the checks compare against."""

    def __init__(self, turns: Iterable[str]) -> None:
        texts = [t for t in turns if isinstance(t, str)]
        self.text = " ".join(" ".join(_fold(t).split()) for t in texts)
        self.words = set()
        self.digits = []
        self.compact = []  # letters and digits only, spoken email symbols dropped
        for t in texts:
            ws = _words(t)
            self.words.update(ws)
            self.digits.append(_spoken_digits(ws))
            self.compact.append("".join(w for w in ws if w not in _EMAIL_WORDS))
        self.plain = "".join(_words(self.text))

    def __bool__(self) -> bool:
        return bool(self.text)


def placeholder_reason(text: str, heard: CallerWords) -> str | None:
    """Why ``text`` is a placeholder rather than the caller's answer, or None when it is not."""
    folded = " ".join(_fold(text).split()).strip(" .!")
    if folded in PLACEHOLDERS or not any(ch.isalnum() for ch in folded):
        return "that is a placeholder, not what the caller said; ask the caller for it"
    if folded in SAMPLE_VALUES and folded not in heard.text:
        return "that is a sample value the caller never said; ask the caller for it"
    return None


_CLOCK = re.compile(r"^\d{1,2}:\d{2}$")


def _digits_of(value: str) -> str:
    return "".join(ch for ch in value if ch.isdigit())


def in_callers_words(kind: str, value: Any, heard: CallerWords, *,
                     span: str | None = None) -> bool:
    """Whether ``value`` (a slot of type ``kind``, as the Director wrote it) is in the caller's words.

    ``str``: every word of the value was said (in any of the window's caller turns), or its
    letters and digits appear run together ("HX 4471 22" for "HX447122"). ``phone``: the
    number's last nine digits (without a country or trunk prefix) were said, digits or
    words. ``email``: the address's letters and digits were said, spoken symbols dropped.
    Dates and times written as words: those words were said; written in ISO form, only the
    span can show where they came from (checked by the caller, which resolves it). Other
    kinds compare the value's words. ``span`` counts as evidence when it was said and the
    value's own check fails only for its form (numbers in words, ISO dates).
    """
    if not heard:
        return True  # nothing to check against (a turn without caller words)
    text = str(value)
    if kind == "phone":
        digits = _digits_of(text)
        tail = digits[-9:] if len(digits) >= 9 else digits
        return bool(tail) and any(tail in said for said in heard.digits)
    if kind == "email":
        compact = "".join(_words(text.replace("@", " ").replace(".", " ")))
        return bool(compact) and any(compact in said for said in heard.compact)
    number = kind in ("int", "float") and text.replace(".", "", 1).lstrip("-").isdigit()
    # "five" and "5" both count: the digits view reads spoken digits
    if number and any(text.lstrip("-") in said for said in heard.digits):
        return True
    if kind == "str" and _CLOCK.match(text) and clock_said(text, heard):
        return True  # a free-text slot holding a clock reading the model normalised ("at ten")
    words = _words(text)
    if not words:
        return False
    if all(w in heard.words for w in words):
        return True
    if "".join(words) in heard.plain:
        return True
    if span is not None and kind in ("date", "time", "datetime", "int", "float"):
        return span_said(span, heard)
    return False


def span_said(span: str, heard: CallerWords) -> bool:
    """The span's words were said, in order, in one of the window's caller turns."""
    words = _words(span)
    return bool(words) and " ".join(words) in " ".join(_words(heard.text))


_NUMBER_NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                 "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
                 "seventeen", "eighteen", "nineteen", "twenty")  # fmt: skip
_MINUTE_WORDS = {0: (), 15: ("quarter", "fifteen"), 30: ("half", "thirty"),
                 45: ("quarter", "forty", "fortyfive")}  # fmt: skip


def _hour_names(hour: int) -> set[str]:
    twelve = hour % 12 or 12
    names = {str(hour), str(twelve), f"{hour:02d}", _NUMBER_NAMES[twelve]}
    if hour == 12:
        names |= {"noon", "midday"}
    if hour == 0:
        names.add("midnight")
    return names


def clock_said(value: str, heard: CallerWords) -> bool:
    """A time "HH:MM" whose hour and minutes the caller said in some form ("seven pm" for
    19:00, "half past nine" for 09:30, "quarter to five" for 16:45, "14:30").

    The model may settle morning or evening from context; this only asks that the clock
    reading came from the caller, not from nowhere (such as the prompt's own clock).
    """
    try:
        hour, minute = (int(part) for part in value.split(":")[:2])
    except ValueError:
        return False
    words = heard.words | {w.replace("-", "") for w in heard.words}
    hours = _hour_names(hour)
    if minute >= 40:  # "quarter to five", "ten to five"
        hours |= _hour_names((hour + 1) % 24)
    if not hours & words:
        return False
    if minute == 0:
        return True
    minute_words = {str(minute), f"{minute:02d}", *_MINUTE_WORDS.get(minute, ())}
    if minute <= 20:
        minute_words.add(_NUMBER_NAMES[minute])
    if minute >= 40 and 60 - minute <= 20:
        minute_words.add(_NUMBER_NAMES[60 - minute])
        minute_words.add(str(60 - minute))
    return bool(minute_words & words) or f"{hour}:{minute:02d}" in heard.text
