"""Call-start values from the dispatch (SPEC §4.4) and call.* from SIP attributes (SPEC §4.5)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from livekit import rtc
from livekit.agents.testing import fake_job_context
from superdialog_core.errors import CallStartError
from superdialog_core.playbook import Playbook

from superdialog_livekit.call import (
    CALL_START_ENV,
    call_start_from_job,
    call_values_from_job,
    call_values_from_participant,
    normalize_number,
)

PLAYBOOK = """
call_start:
  customer_id: {type: str, required: true}
  brand: {type: str}
  party_size: {type: int}
journeys:
  main:
    checkpoints:
      - id: hello
        say_verbatim: "Hello {{ slots.brand | default('') }}"
        terminal: true
        outcome: done
"""


@pytest.fixture
def playbook() -> Playbook:
    return Playbook.from_yaml(PLAYBOOK)


@pytest.fixture(autouse=True)
def _no_env_call_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CALL_START_ENV, raising=False)


def _start(metadata: str, playbook: Playbook) -> dict:
    with fake_job_context(job_metadata=metadata) as ctx:
        return call_start_from_job(ctx, playbook)


async def test_dispatch_call_start_values_are_coerced(playbook: Playbook) -> None:
    meta = json.dumps({"call_start": {"customer_id": "C-17", "party_size": "4"}, "dial": "+4930"})
    assert _start(meta, playbook) == {"customer_id": "C-17", "party_size": 4}


async def test_every_problem_is_listed_and_nothing_is_returned(playbook: Playbook) -> None:
    meta = json.dumps({"call_start": {"brnd": "acme", "party_size": "lots"}})
    with pytest.raises(CallStartError) as info:
        _start(meta, playbook)
    paths = {p.path for p in info.value.problems}
    assert paths == {"call_start.brnd", "call_start.party_size", "call_start.customer_id"}
    text = str(info.value)
    assert "brand" in text  # the did-you-mean hint
    assert "'customer_id' is missing" in text
    assert "'lots' does not fit" in text


async def test_empty_string_counts_as_missing(playbook: Playbook) -> None:
    with pytest.raises(CallStartError, match="required call-start value 'customer_id' is missing"):
        _start(json.dumps({"call_start": {"customer_id": ""}}), playbook)


async def test_malformed_metadata_is_a_call_start_error(playbook: Playbook) -> None:
    with pytest.raises(CallStartError, match=r"job\.metadata: is not valid JSON"):
        _start("{not json", playbook)
    with pytest.raises(CallStartError, match=r"job\.metadata\.call_start: must be a JSON object"):
        _start(json.dumps({"call_start": ["C-1"]}), playbook)


async def test_env_call_start_is_merged_under_the_dispatch(
    playbook: Playbook, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CALL_START_ENV, json.dumps({"customer_id": "LOCAL", "brand": "envbrand"}))
    assert _start("", playbook) == {"customer_id": "LOCAL", "brand": "envbrand"}
    meta = json.dumps({"call_start": {"customer_id": "C-9"}})
    assert _start(meta, playbook) == {"customer_id": "C-9", "brand": "envbrand"}


async def test_bad_env_json_names_the_variable(playbook: Playbook, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CALL_START_ENV, "[1, 2]")
    with pytest.raises(CallStartError, match=f"{CALL_START_ENV}: must be a JSON object"):
        _start(json.dumps({"call_start": {"customer_id": "C"}}), playbook)


def _sip(**attrs: str) -> SimpleNamespace:
    return SimpleNamespace(kind=rtc.ParticipantKind.PARTICIPANT_KIND_SIP, attributes=attrs)


def test_inbound_sip_call_maps_caller_and_trunk() -> None:
    values = call_values_from_participant(_sip(**{
        "sip.ruleID": "SDR_1", "sip.phoneNumber": "+4915112345678",
        "sip.trunkPhoneNumber": "+493012345678", "sip.callIDFull": "abc@carrier", "sip.callID": "SCL_x",
    }))
    assert values == {
        "channel": "phone", "direction": "inbound",
        "calling_number": "+4915112345678", "called_number": "+493012345678",
        "remote_number": "+4915112345678", "carrier_call_id": "abc@carrier",
    }


def test_outbound_sip_call_has_no_rule_id_and_the_remote_is_the_callee() -> None:
    values = call_values_from_participant(_sip(**{
        "sip.phoneNumber": "+14155552671", "sip.trunkPhoneNumber": "+493012345678",
    }))
    assert values["direction"] == "outbound"
    assert values["calling_number"] == "+493012345678"
    assert values["called_number"] == values["remote_number"] == "+14155552671"


@pytest.mark.parametrize("withheld", ["anonymous", "+266696687", "", "Restricted", "+1", "12ab"])
def test_withheld_or_malformed_numbers_read_none(withheld: str) -> None:
    values = call_values_from_participant(_sip(**{"sip.ruleID": "r", "sip.phoneNumber": withheld}))
    assert values["calling_number"] is None and values["remote_number"] is None
    assert values["channel"] == "phone"


def test_the_line_wins_over_the_dispatch_on_a_phone_call() -> None:
    dispatch = {"calling_number": "+14155552671", "direction": "outbound", "carrier_call_id": "d-1"}
    values = call_values_from_participant(_sip(**{"sip.ruleID": "r", "sip.phoneNumber": "+4915112345678"}),
                                          dispatch)
    assert values["direction"] == "inbound"
    assert values["calling_number"] == "+4915112345678"
    assert values["carrier_call_id"] == "d-1"  # the line left it empty


def test_a_web_call_takes_every_dispatch_field() -> None:
    web = SimpleNamespace(kind=rtc.ParticipantKind.PARTICIPANT_KIND_STANDARD, attributes={})
    values = call_values_from_participant(web, {"channel": "phone", "direction": "inbound",
                                                "calling_number": "+4915112345678", "session_id": "s-1"})
    assert values["channel"] == "phone" and values["remote_number"] == "+4915112345678"
    assert values["session_id"] == "s-1"
    assert call_values_from_participant(None)["channel"] == "web"


async def test_call_values_from_job_reads_the_dispatch_call_object() -> None:
    meta = json.dumps({"call": {"direction": "outbound", "called_number": "+14155552671"}})
    with fake_job_context(job_metadata=meta) as ctx:
        values = call_values_from_job(ctx)
    assert values["direction"] == "outbound" and values["remote_number"] == "+14155552671"


def test_normalize_number_accepts_international_prefix_forms() -> None:
    assert normalize_number("004915112345678") == "+4915112345678"
    assert normalize_number("tel:+14155552671") == "+14155552671"
    assert normalize_number(None) is None
