"""Spoken forms (SPEC §16): dates, times and digit strings as a voice should say them."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta, timezone

import pytest
from jinja2 import ChainableUndefined
from superdialog_core.lang.spoken import spoken_date, spoken_digits, spoken_time


@pytest.mark.parametrize(
    "value",
    [
        "2026-12-01",
        " 2026-12-01 ",
        date(2026, 12, 1),
        datetime(2026, 12, 1, 9, 30),
        "2026-12-01T09:30:00+01:00",
    ],
)
def test_spoken_date_english(value: object) -> None:
    assert spoken_date(value) == "Tuesday, December 1"


def test_spoken_date_other_languages_use_their_own_order() -> None:
    assert spoken_date("2026-12-01", "de") == "Dienstag, 1. Dezember"
    assert spoken_date("2026-12-01", "fr") == "mardi 1 décembre"
    assert spoken_date("2026-12-01", "en-GB") == "Tuesday 1 December"


def test_spoken_date_unparseable_is_unchanged() -> None:
    assert spoken_date("next tuesday") == "next tuesday"
    assert spoken_date(42) == 42


def test_spoken_date_absent_passes_through() -> None:
    assert spoken_date(None) is None
    undefined = ChainableUndefined()
    assert spoken_date(undefined) is undefined


def test_spoken_date_unknown_language_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown language 'xx_nope'"):
        spoken_date("2026-12-01", "xx_nope")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("14:30", "2:30 PM"),
        ("09:00", "9:00 AM"),
        ("00:05", "12:05 AM"),
        ("14:30:00", "2:30 PM"),
        (time(18, 5), "6:05 PM"),
        (datetime(2026, 12, 1, 19, 0), "7:00 PM"),
        ("2026-12-01T19:00:00", "7:00 PM"),
    ],
)
def test_spoken_time_english(value: object, expected: str) -> None:
    assert spoken_time(value) == expected


def test_spoken_time_keeps_the_written_wall_clock_of_an_aware_time() -> None:
    moment = datetime(2026, 12, 1, 19, 0, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    assert spoken_time(moment) == "7:00 PM"
    assert spoken_time("19:00:00+05:30") == "7:00 PM"


def test_spoken_time_other_language() -> None:
    assert spoken_time("14:30", "de") == "14:30"


def test_spoken_time_unparseable_is_unchanged() -> None:
    assert spoken_time("noon") == "noon"
    assert spoken_time(None) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("+4930123456", "plus 4 9 3, 0 1 2, 3 4 5 6"),
        ("+49 30 123456", "plus 4 9, 3 0, 1 2 3, 4 5 6"),
        ("555-1234", "5 5 5, 1 2 3 4"),
        ("5551234", "5 5 5, 1 2 3 4"),
        ("12345678901", "1 2 3, 4 5 6, 7 8 9, 0 1"),
        ("ab-12", "A B, 1 2"),
        ("(030) 1234.567", "0 3 0, 1 2 3 4, 5 6 7"),
        (4930, "4 9 3 0"),
        ("", ""),
    ],
)
def test_spoken_digits_groups(value: object, expected: str) -> None:
    assert spoken_digits(value) == expected


def test_spoken_digits_never_leaves_a_lone_last_digit() -> None:
    for length in range(5, 20):
        groups = spoken_digits("7" * length).split(", ")
        assert all(2 <= len(g.split(" ")) <= 4 for g in groups), (length, groups)


def test_spoken_digits_absent_passes_through() -> None:
    assert spoken_digits(None) is None
