"""Slot value coercion (SPEC §4.1): stored forms, and refusals worded for the next question."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from superdialog_core.playbook import SlotSpec
from superdialog_core.values.coerce import (
    ValueContext,
    ValueRefused,
    coerce,
    phone_region_of,
    warm_up,
)

BERLIN = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 11, 30, 10, 0, tzinfo=BERLIN)
CTX = ValueContext(now=NOW, timezone="Europe/Berlin")


def ok(type_: str, raw: Any, ctx: ValueContext = CTX, **spec: Any) -> Any:
    return coerce("slot", SlotSpec(type=type_, **spec), raw, ctx)


def refused(type_: str, raw: Any, ctx: ValueContext = CTX, key: str = "slot", **spec: Any) -> str:
    with pytest.raises(ValueRefused) as info:
        coerce(key, SlotSpec(type=type_, **spec), raw, ctx)
    err = info.value
    assert err.key == key
    assert err.message == str(err) == f"{key}: {err.reason}"
    assert "; ask" in err.message, "every refusal ends with what to ask the caller"
    return err.message


# --- context ---------------------------------------------------------------------------------


def test_context_requires_an_aware_now() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        ValueContext(now=datetime(2026, 11, 30), timezone="Europe/Berlin")


def test_context_rejects_unknown_zone_and_region() -> None:
    with pytest.raises(ValueError, match="unknown timezone 'Mars/Base'"):
        ValueContext(now=NOW, timezone="Mars/Base")
    with pytest.raises(ValueError, match="phone_region 'XX'"):
        ValueContext(now=NOW, timezone="UTC", phone_region="XX")


def test_context_normalises_region_case() -> None:
    assert ValueContext(now=NOW, timezone="UTC", phone_region="de").phone_region == "DE"


def test_none_is_refused_for_every_type() -> None:
    for type_ in ("str", "int", "date", "phone", "array"):
        assert refused(type_, None, key="x") == "x: no value was given; ask the caller for it"


# --- str -------------------------------------------------------------------------------------


def test_str_collapses_whitespace_and_turns_numbers_into_text() -> None:
    assert ok("str", "  Jo \n  Bloggs ") == "Jo Bloggs"
    assert ok("str", 42) == "42"
    assert ok("str", 4.0) == "4"
    assert ok("str", 2.5) == "2.5"
    assert ok("str", "none") == "none"  # an explicit decline is a value


def test_str_is_capped() -> None:
    assert len(ok("str", "word " * 300)) <= 500


@pytest.mark.parametrize("raw", ["", "   ", "null", "NULL"])
def test_str_empty_or_null_is_refused_unless_allowed(raw: str) -> None:
    assert refused("str", raw, key="name").startswith("name: nothing was given")
    assert ok("str", "", allow_empty=True) == ""
    refused("str", "null", allow_empty=True)


def test_str_refuses_containers_and_non_finite_numbers() -> None:
    refused("str", ["a"])
    refused("str", math.nan)


# --- numbers and bool ------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "want"), [(4, 4), (4.0, 4), ("4", 4), (" 12 ", 12), ("4.0", 4),
                                           ("1,000", 1000), (-3, -3)])
def test_int_accepts_integral_values(raw: Any, want: int) -> None:
    got = ok("int", raw)
    assert got == want and type(got) is int


def test_int_refusals_are_worded() -> None:
    assert "in words" in refused("int", "four", key="party_size")
    assert "not a whole number" in refused("int", 4.5)
    assert "not a whole number" in refused("int", "4.5")
    assert "yes or no" in refused("int", True)
    refused("int", "1_0")
    refused("int", "nan")
    refused("int", math.inf)
    refused("int", [4])


def test_float() -> None:
    assert ok("float", "2.5") == 2.5
    assert ok("float", 3) == 3.0 and type(ok("float", 3)) is float
    refused("float", "two and a half")
    refused("float", math.nan)


@pytest.mark.parametrize(("raw", "want"), [(True, True), ("Yes", True), (" TRUE ", True), ("1", True),
                                           (1, True), ("no", False), ("False", False), (0, False)])
def test_bool_accepts(raw: Any, want: bool) -> None:
    assert ok("bool", raw) is want


@pytest.mark.parametrize("raw", ["maybe", "y", 2, [], "ja"])
def test_bool_refuses(raw: Any) -> None:
    assert "yes or no" in refused("bool", raw)


# --- enum ------------------------------------------------------------------------------------


def test_enum_matches_loosely_and_stores_as_declared() -> None:
    assert ok("enum", "  WINDOW   seat ", values=["Window seat", "Aisle"]) == "Window seat"
    assert ok("enum", 3, values=["3", "4"]) == "3"
    assert ok("enum", "2", values=[1, 2]) == 2
    assert ok("enum", "a", values=["A", "a"]) == "a"  # an exact match wins


def test_enum_refusal_names_the_choices() -> None:
    message = refused("enum", "terrace", key="seating", values=["inside", "outside"])
    assert message == (
        "seating: that is not one of the choices (inside, outside); "
        "ask the caller which of these they want"
    )
    refused("enum", {"x": 1}, values=["x"])
    refused("enum", "x", values=[])


# --- containers and email --------------------------------------------------------------------


def test_array_and_object_accept_values_and_json_text() -> None:
    assert ok("array", [1, "a"]) == [1, "a"]
    assert ok("array", '["a", "b"]') == ["a", "b"]
    assert ok("object", {"a": 1}) == {"a": 1}
    assert ok("object", '{"a": 1}') == {"a": 1}
    refused("array", "a, b")
    refused("array", {"a": 1})
    refused("object", "[1]")
    refused("object", "not json")


def test_email_is_normalised_without_dns() -> None:
    assert ok("email", "Jo.Bloggs@GMAIL.COM") == "Jo.Bloggs@gmail.com"
    assert ok("email", "jo . bloggs@example.org".replace(" . ", ".")) == "jo.bloggs@example.org"


@pytest.mark.parametrize("raw", ["jo@", "jo", "jo@localhost", "@example.org", 5])
def test_email_refused(raw: Any) -> None:
    message = refused("email", raw, key="email")
    assert message.endswith("ask the caller to spell the address again")


# --- dates -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "want"), [
    ("tomorrow", "2026-12-01"),
    ("2026-12-03", "2026-12-03"),
    ("next friday", "2026-12-04"),
    ("friday", "2026-12-04"),
    ("in 3 days", "2026-12-03"),
    ("December 3", "2026-12-03"),
    ("13/03/2027", "2027-03-13"),  # only one order makes sense
    ("today", "2026-11-30"),
])
def test_date_resolves_against_the_anchor(raw: str, want: str) -> None:
    assert ok("date", raw) == want


def test_date_uses_the_call_timezone_not_utc() -> None:
    # 23:30 UTC on the 30th is already 00:30 on 1 December in Berlin
    late = ValueContext(now=datetime(2026, 11, 30, 23, 30, tzinfo=ZoneInfo("UTC")),
                        timezone="Europe/Berlin")
    assert ok("date", "tomorrow", late) == "2026-12-02"
    assert ok("date", "today", late, future_only=True) == "2026-12-01"
    refused("date", "2026-11-30", late, future_only=True)


def test_date_in_the_past_is_refused_only_when_future_only() -> None:
    assert refused("date", "yesterday", key="day", future_only=True) == (
        "day: that day is in the past; ask for a day from today on"
    )
    assert ok("date", "yesterday") == "2026-11-29"
    assert ok("date", "2026-11-30", future_only=True) == "2026-11-30"


@pytest.mark.parametrize("raw", ["soon", "this weekend", "whenever suits", "asap"])
def test_unresolvable_dates_are_refused_with_a_question(raw: str) -> None:
    assert refused("date", raw, key="day").endswith("ask the caller which day they mean")


@pytest.mark.parametrize("raw", ["03/12/2026", "11", "four"])
def test_ambiguous_dates_are_refused_not_guessed(raw: str) -> None:
    assert "more than one" in refused("date", raw)


def test_date_refuses_vague_spans_impossible_days_and_junk() -> None:
    assert "not one exact day" in refused("date", "next week")
    assert "does not exist" in refused("date", "2026-02-30")
    refused("date", "x" * 500)
    refused("date", ["2026-12-01"])


# --- times -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "want"), [
    ("20:30", "20:30"), ("09:30", "09:30"), ("8 pm", "20:00"), ("8:30pm", "20:30"),
    ("8.30 pm", "20:30"), ("noon", "12:00"), ("20:30:00", "20:30"), ("20", "20:00"), ("00:15", "00:15"),
])
def test_time_accepts(raw: str, want: str) -> None:
    assert ok("time", raw) == want


@pytest.mark.parametrize("raw", ["9:30", "8", "12"])
def test_time_without_morning_or_evening_is_asked(raw: str) -> None:
    assert "morning or the evening" in refused("time", raw)


@pytest.mark.parametrize("raw", ["half past seven", "tonight", "later", "25:00", "20:61", "tomorrow"])
def test_time_refused(raw: str) -> None:
    refused("time", raw)


# --- datetimes -------------------------------------------------------------------------------


def test_datetime_iso_naive_is_local_and_offsets_are_kept_as_instants() -> None:
    assert ok("datetime", "2026-12-01T20:00") == "2026-12-01T20:00:00+01:00"
    assert ok("datetime", "2026-12-01T19:00Z") == "2026-12-01T20:00:00+01:00"
    assert ok("datetime", "2026-07-01T20:00:00+02:00") == "2026-07-01T20:00:00+02:00"


def test_datetime_from_words() -> None:
    assert ok("datetime", "tomorrow at 8pm") == "2026-12-01T20:00:00+01:00"


def test_datetime_refusals() -> None:
    assert "no exact time" in refused("datetime", "tomorrow")
    assert refused("datetime", "2026-11-29T20:00", key="at", future_only=True) == (
        "at: that time is in the past; ask for a time from now on"
    )
    assert "clocks change" in refused("datetime", "2026-03-29T02:30")
    refused("datetime", "soon")


# --- phone -----------------------------------------------------------------------------------


def test_phone_with_plus_is_stored_as_e164() -> None:
    assert ok("phone", "+1 212 555 0100") == "+12125550100"
    assert ok("phone", "+49 (30) 123-4567") == "+49301234567"
    assert ok("phone", "0049 30 1234567") == "+49301234567"


def test_phone_national_number_needs_the_region() -> None:
    de = ValueContext(now=NOW, timezone="Europe/Berlin", phone_region="DE")
    assert ok("phone", "030 1234567", de) == "+49301234567"
    assert refused("phone", "030 1234567", key="phone") == (
        "phone: that number has no country code; ask the caller for the country code"
    )


def test_phone_digits_with_two_valid_readings_are_refused() -> None:
    gb = ValueContext(now=NOW, timezone="Europe/London", phone_region="GB")
    # valid as +238 (Cape Verde) and as a national UK number: never guess which
    message = refused("phone", "2389644423", gb)
    assert "more than one country" in message and message.endswith("ask the caller for the country code")
    # the same digits are one reading without a region
    assert ok("phone", "2389644423") == "+2389644423"


def test_phone_json_number_is_repaired() -> None:
    assert ok("phone", 4930123456) == "+4930123456"


@pytest.mark.parametrize(("raw", "why"), [
    ("612", "too short"),
    ("+49 30", "too short"),
    ("+49 30 1234 5678 9012 34", "too long"),
    ("+999 123456", "no country has that code"),
    ("+1 212 555 0100 ext. 12", "extension"),
    ("tel: +1 212 555 0100", "letters"),
    ("call me", "letters"),
    (True, "not a phone number"),
])
def test_phone_refusals_say_why(raw: Any, why: str) -> None:
    assert why in refused("phone", raw, key="phone")


def test_phone_region_of_the_callers_number() -> None:
    assert phone_region_of("+49301234567") == "DE"
    assert phone_region_of("+12125550100") == "US"
    assert phone_region_of("not a number") is None


# --- properties ------------------------------------------------------------------------------

TYPES = ["str", "int", "float", "bool", "date", "time", "datetime", "phone", "email", "array", "object"]
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@settings(deadline=None)  # dateparser's first parse is slow when this test runs alone
@given(type_=st.sampled_from(TYPES), raw=JSONISH)
def test_any_json_input_is_stored_or_refused_with_a_keyed_message(type_: str, raw: Any) -> None:
    try:
        value = coerce("k", SlotSpec(type=type_), raw, CTX)
    except ValueRefused as err:
        assert err.message.startswith("k: ") and "; ask" in err.message
        return
    # what is stored is JSON-native and stable: coercing it again gives it back
    assert coerce("k", SlotSpec(type=type_), value, CTX) == value


def test_warm_up_runs() -> None:
    warm_up()
    warm_up("de")
    assert ok("date", "tomorrow") == "2026-12-01"


def test_dates_in_the_call_language() -> None:
    de = ValueContext(now=NOW, timezone="Europe/Berlin", language="de")
    assert ok("date", "morgen", de) == "2026-12-01"
    assert ok("date", "3. Dezember", de) == "2026-12-03"
    assert ok("date", "tomorrow", de) == "2026-12-01"  # English stays readable
    gb = ValueContext(now=NOW, timezone="Europe/London", language="en-GB")
    assert ok("date", "tomorrow", gb) == "2026-12-01"


def test_grouped_numbers_follow_the_call_locale_and_ambiguity_is_asked() -> None:
    de = ValueContext(now=NOW, timezone="Europe/Berlin", language="de")
    assert ok("float", "1,5", de) == 1.5
    assert ok("float", "2.5", de) == 2.5
    assert ok("int", "12", de) == 12
    assert "more than one number" in refused("int", "1,000", de)
    assert "more than one number" in refused("int", "1.000", de)
    assert ok("int", "1,000") == 1000
    refused("float", "1,5")  # not a number in English


# --- hardening (H10) -------------------------------------------------------------------------
@pytest.mark.parametrize("raw", ["November 30", "30 November", "Nov 30th"])
def test_todays_date_by_name_is_today_not_next_year(raw: str) -> None:
    assert ok("date", raw, future_only=True) == "2026-11-30"
    # and it is the call's today: in Tokyo it is already December 1
    tokyo = ValueContext(now=datetime(2026, 11, 30, 23, 30, tzinfo=ZoneInfo("UTC")),
                         timezone="Asia/Tokyo")  # fmt: skip
    assert ok("date", "December 1", tokyo, future_only=True) == "2026-12-01"


def test_todays_date_with_an_earlier_hour_is_today() -> None:
    assert ok("datetime", "November 30 at 9am") == "2026-11-30T09:00:00+01:00"
    assert "in the past" in refused("datetime", "November 30 at 9am", future_only=True)


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("a week from today", "2026-12-07"),
        ("3 days from today", "2026-12-03"),
        ("two days from now", "2026-12-02"),
        ("a week today", "2026-12-07"),
        ("in a week", "2026-12-07"),
        ("in 2 weeks", "2026-12-14"),
    ],
)
def test_offsets_from_today_count_forward(raw: str, want: str) -> None:
    assert ok("date", raw, future_only=True) == want


@pytest.mark.parametrize("zone", ["UTC", "America/Los_Angeles", "Asia/Tokyo"])
def test_a_bare_clock_time_is_today_in_the_call_zone(zone: str) -> None:
    # 23:30 UTC on November 30 (a month's last day): dateparser alone gave November 1
    ctx = ValueContext(now=datetime(2026, 11, 30, 23, 30, tzinfo=ZoneInfo("UTC")), timezone=zone)
    today = ctx.local_now.date().isoformat()
    for raw, clock in [("8 pm", "20:00"), ("9 am", "09:00"), ("noon", "12:00")]:
        assert ok("datetime", raw, ctx).startswith(f"{today}T{clock}:00")
        assert ok("time", raw, ctx) == clock
    tomorrow = (ctx.local_now + timedelta(days=1)).date().isoformat()
    assert ok("datetime", "tomorrow at 8 pm", ctx).startswith(f"{tomorrow}T20:00:00")


def test_a_bare_clock_time_that_has_passed_is_refused_when_future_only() -> None:
    late = ValueContext(now=datetime(2026, 11, 30, 23, 30, tzinfo=ZoneInfo("UTC")), timezone="UTC")
    assert "in the past" in refused("datetime", "8 pm", late, future_only=True)


def test_absurdly_deep_or_large_containers_are_refused_not_crashing() -> None:
    deep_text = "[" * 100_000 + "]" * 100_000  # json.loads raises RecursionError on this
    assert "not a list" in refused("array", deep_text)
    assert "not a set of named details" in refused("object", '{"a":' * 50_000 + "1" + "}" * 50_000)
    nested: Any = "x"
    for _ in range(20):
        nested = [nested]
    assert "too large" in refused("array", nested)
    assert "too large" in refused("array", list(range(500)))
    assert "too large" in refused("object", {"k": {"a": [[[[[[["deep"]]]]]]]}})
    assert "too large" in refused("object", {"note": "word " * 1000})
    assert ok("array", [{"sku": "a", "n": 2}, {"sku": "b", "n": 1}]) == [
        {"sku": "a", "n": 2}, {"sku": "b", "n": 1}]  # fmt: skip


@pytest.mark.parametrize(("said", "day"), [
    ("on the fourth of December", "2026-12-04"),
    ("the twenty-first of December", "2026-12-21"),
    ("December the third", "2026-12-03"),
])
def test_a_spelled_day_of_the_month_is_read(said: str, day: str) -> None:
    # dateparser reads a day of the month only in digits; the engine turns "fourth" into "4th"
    # when it stands next to a month (the Director may pass the caller's words, SPEC §4.1).
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from superdialog_core.playbook import SlotSpec
    from superdialog_core.values.coerce import ValueContext, coerce

    ctx = ValueContext(now=datetime(2026, 12, 1, 10, tzinfo=ZoneInfo("Europe/Rome")),
                       timezone="Europe/Rome")
    assert coerce("day", SlotSpec(type="date"), said, ctx) == day
