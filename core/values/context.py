"""What slot coercion resolves against and how it refuses (SPEC §4.1), shared by the type modules.

``ValueContext`` carries the call's date anchor, zone, phone region and language;
``ValueRefused`` is a misfit worded for the model's next question. Import both from
:mod:`superdialog_core.values.coerce`, the public face of coercion; :mod:`.dates` and :mod:`.phones`
read them from here so that nothing imports in a circle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

PARSE_MAX = 120  # longest text handed to a parser; longer is not a date, time, number or phone


class SlotTypeSpec(Protocol):
    """The fields of a slot declaration that coercion reads (``format.playbook.SlotSpec`` has them).

    A protocol, so the value types never import the playbook models and stay below them.
    """

    @property
    def type(self) -> Literal[
        "str", "int", "float", "bool", "date", "time", "datetime", "enum", "array", "object",
        "phone", "email",
    ]: ...
    @property
    def values(self) -> list[Any] | None: ...
    @property
    def allow_empty(self) -> bool: ...
    @property
    def future_only(self) -> bool: ...


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
        zone(self.timezone)  # fail at construction, not on the first date a caller says
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
        return self.now.astimezone(zone(self.timezone)).replace(tzinfo=None)


def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``; ValueError with the fix for an unknown one."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(
            f"unknown timezone {name!r}; use an IANA name such as 'Europe/Berlin'"
        ) from exc


def collapse(text: str) -> str:
    """Runs of whitespace (newlines too) become one space; the ends are trimmed."""
    return " ".join(text.split())


def text_of_number(key: str, raw: int | float) -> str:
    """A number as a caller would say it ("4", not "4.0"); refuses inf and nan."""
    if isinstance(raw, float):
        if not math.isfinite(raw):
            raise ValueRefused(key, "that is not a finite number; ask the caller for it again")
        if raw.is_integer():
            return str(int(raw))
    return str(raw)


def short_text(key: str, raw: Any, what: str, ask: str) -> str:
    """Text a parser may read: a collapsed string of bounded length (numbers become their text)."""
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise ValueRefused(key, f"that is not {what}; {ask}")
    text = collapse(raw) if isinstance(raw, str) else text_of_number(key, raw)
    if not text:
        raise ValueRefused(key, f"nothing was given for it; {ask}")
    if len(text) > PARSE_MAX:
        raise ValueRefused(key, f"that is too long to be {what}; {ask}")
    return text
