"""Phone numbers for slot coercion (SPEC §4.1): E.164 via ``phonenumbers``, region rules.

A number with a country code (``+`` or ``00``) must be valid as written. Without one it is
kept only when exactly one reading is valid: international, or national in the call's region
(``policies.phone_region`` or the caller's own number's region, see :func:`phone_region_of`).
Every refusal says what to ask next (the area code, the country code, the whole number again).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .context import SlotTypeSpec, ValueContext, ValueRefused, short_text

_PHONE_REASONS = {
    "TOO_SHORT": "that number is too short, a digit may be missing",
    "TOO_LONG": "that number is too long, a digit may have been misheard or said twice",
    "INVALID_LENGTH": "that number has the wrong number of digits",
    "INVALID_COUNTRY_CODE": "no country has that code",
}
_PHONE_ASK = "ask the caller to repeat the whole number"
_ASK_CODE = "ask the caller for the country code"


# phonenumbers (~20 ms, large metadata) is imported by the first phone slot, not at start-up.


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


def coerce_phone(key: str, spec: SlotTypeSpec, raw: Any, ctx: ValueContext) -> str:
    import phonenumbers

    text = short_text(key, raw, "a phone number", _PHONE_ASK)
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
