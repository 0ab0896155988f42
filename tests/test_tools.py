"""Tools and pipelines against a real HTTP server on 127.0.0.1 (tests/loopback.py).

Nothing here leaves the machine: every URL points at the loopback server (allowed through
policies.allow_hosts), and the SSRF cases use a client whose transport fails the test on any
request.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from loopback import LoopbackServer, RecordedRequest, Reply, closed_port
from superdialog_core import events as ev
from superdialog_core.format.yaml12 import load_yaml
from superdialog_core.log.eventlog import EventLog
from superdialog_core.log.state import ConversationState
from superdialog_core.playbook import Playbook
from superdialog_core.tools.http import is_secret_key, redact_body, redact_url
from superdialog_core.tools.runner import PipelineOutcome, ToolRunner, bind_python_tool, is_refused

PLAYBOOKS = Path(__file__).resolve().parent.parent / "playbooks"


class Call:
    """One conversation's log and state, with the ``emit`` the runtime would give a tool runner."""

    def __init__(self, playbook: Playbook) -> None:
        self.log = EventLog()
        self.state = ConversationState(playbook)

    def emit(self, event: ev.Event) -> ev.Event:
        self.log.append(event)
        self.state.apply(event)
        return event

    def of(self, kind: type[ev.Event]) -> list[Any]:
        return [e for e in self.log if isinstance(e, kind)]

    def write(self, key: str, value: Any, status: str = "accepted", by: str = "director") -> None:
        self.emit(ev.SlotWrite(key=key, value=value, status=status, by=by))  # type: ignore[arg-type]

    def jsonl(self) -> str:
        return self.log.to_jsonl()


def booking_playbook(**overrides: Any) -> Playbook:
    """A small booking playbook; tools/pipelines/middleware come from ``overrides``."""
    doc: dict[str, Any] = {
        "journeys": {"visit": {"checkpoints": [
            {"id": "details", "slots": {
                "patient_name": {"type": "str", "confirm": True},
                "party": {"type": "int"},
                "day": {"type": "date"},
            }},
            {"id": "book", "gate": "hard", "pipeline": "book",
             "slots": {"booking_ref": {"type": "str", "authoritative": True}}},
            {"id": "slot_taken"},
            {"id": "done", "terminal": True, "outcome": "booked"},
            {"id": "handoff", "terminal": True, "outcome": "callback"},
        ]}},
        "policies": {"allow_hosts": ["127.0.0.1"]},
        "tools": [],
        "pipelines": [],
    }
    doc.update(overrides)
    return Playbook.model_validate(doc)


def create_visit(**extra: Any) -> dict[str, Any]:
    tool = {
        "id": "create_visit", "method": "POST",
        "url": "{{ env.API_BASE }}/visits?api_key={{ env.API_TOKEN }}&day={{ slots.day }}",
        "headers": {"Authorization": "Bearer {{ env.API_TOKEN }}"},
        "body": {"name": "{{ slots.patient_name }}", "party": "{{ slots.party }}",
                 "password": "pw-secret-1", "nested": {"pin": "4321", "note": "window seat"}},
        "store_response_as": "visit",
        "slot_updates": {"booking_ref": "ref"},
        "timeout": 5,
    }
    tool.update(extra)
    return tool


def book_pipeline(on: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"id": "book", "steps": [{"tool": "create_visit", "on": on}]}]


@pytest.fixture
def server():
    with LoopbackServer() as srv:
        yield srv


def runner_for(playbook: Playbook, server: LoopbackServer, **kwargs: Any) -> ToolRunner:
    env = {"API_BASE": server.base_url, "API_TOKEN": "tok-secret-1"}
    return ToolRunner(playbook, env=env, retry_backoff=0.0, **kwargs)


def filled(call: Call) -> Call:
    call.write("patient_name", "Ana Lima", status="confirmed", by="caller")
    call.write("party", 4)
    call.write("day", "2026-12-01")
    return call


# --- one HTTP tool ---------------------------------------------------------------------------


async def test_post_sends_typed_body_with_idempotency_key_and_logs_it_redacted(server) -> None:
    server.route("POST", "/visits", Reply(201, json={"ref": "BK-42", "token": "srv-token-9"}))
    playbook = booking_playbook(tools=[create_visit()])
    call = filled(Call(playbook))
    runner = runner_for(playbook, server)

    result = await runner.run_tool("create_visit", state=call.state, emit=call.emit)

    assert result is not None and result.ok and result.status == 201
    [sent] = server.requests
    assert sent.json == {"name": "Ana Lima", "party": 4, "password": "pw-secret-1",
                         "nested": {"pin": "4321", "note": "window seat"}}
    assert isinstance(sent.json["party"], int)
    assert sent.query == {"api_key": "tok-secret-1", "day": "2026-12-01"}
    assert sent.header("authorization") == "Bearer tok-secret-1"
    url = f"{server.base_url}/visits?api_key=tok-secret-1&day=2026-12-01"
    expected_key = hashlib.sha256(json.dumps(
        [None, 0, "create_visit", "POST", url, sent.json], sort_keys=True,
        separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()
    assert sent.header("idempotency-key") == expected_key

    [logged] = call.of(ev.ToolCall)
    assert logged.args["method"] == "POST"
    assert logged.args["url"] == "<env.API_BASE>/visits?api_key=***&day=2026-12-01"
    assert logged.args["body"] == {"name": "Ana Lima", "party": 4, "password": "***",
                                   "nested": {"pin": "***", "note": "window seat"}}
    jsonl = call.jsonl()
    for secret in ("tok-secret-1", "pw-secret-1", "4321", "srv-token-9", "Bearer"):
        assert secret not in jsonl
    assert call.state.results["visit"].data == {"ref": "BK-42", "token": "***"}
    assert call.state.slots["booking_ref"].value == "BK-42"
    assert (call.state.slots["booking_ref"].status, call.state.slots["booking_ref"].by) == ("confirmed", "tool")


async def test_author_supplied_idempotency_key_is_kept_and_get_has_none(server) -> None:
    server.route("POST", "/visits", Reply(200, json={}))
    server.route("GET", "/slots", Reply(200, json=[]))
    playbook = booking_playbook(tools=[
        create_visit(headers={"idempotency-KEY": "mine-1"}),
        {"id": "slots", "url": "{{ env.API_BASE }}/slots"},
    ])
    call = filled(Call(playbook))
    runner = runner_for(playbook, server)
    await runner.run_tool("create_visit", state=call.state, emit=call.emit)
    await runner.run_tool("slots", state=call.state, emit=call.emit)
    post, get = server.requests
    assert post.header("idempotency-key") == "mine-1"
    assert get.header("idempotency-key") is None


async def test_timeout_is_a_failed_result(server) -> None:
    server.route("POST", "/visits", Reply(200, json={}, delay=3.0))
    playbook = booking_playbook(tools=[create_visit(timeout=0.3)])
    call = filled(Call(playbook))
    started = time.perf_counter()
    result = await runner_for(playbook, server).run_tool("create_visit", state=call.state, emit=call.emit)
    assert time.perf_counter() - started < 2.0
    assert result is not None and not result.ok
    assert (result.status, result.error) == (None, "timeout after 0.3 s")
    assert not is_refused(result)


async def test_connection_refused_is_a_failed_result() -> None:
    playbook = booking_playbook(tools=[create_visit()])
    call = filled(Call(playbook))
    runner = ToolRunner(playbook, env={"API_BASE": f"http://127.0.0.1:{closed_port()}",
                                       "API_TOKEN": "t0k-x"})
    result = await runner.run_tool("create_visit", state=call.state, emit=call.emit)
    assert result is not None and not result.ok and result.status is None
    assert result.error is not None and result.error.startswith("connection failed")
    assert len(call.of(ev.ToolCall)) == 1  # it was attempted


@pytest.mark.parametrize("chunked", [False, True])
async def test_body_over_one_mib_is_refused(server, chunked: bool) -> None:
    server.route("POST", "/visits", Reply(200, size=(1 << 20) + 10, chunked=chunked))
    playbook = booking_playbook(tools=[create_visit()])
    call = filled(Call(playbook))
    result = await runner_for(playbook, server).run_tool("create_visit", state=call.state, emit=call.emit)
    assert result is not None and not result.ok
    assert result.error == "response larger than 1 MiB"


async def test_body_of_exactly_one_mib_is_accepted_as_text(server) -> None:
    server.route("POST", "/visits", Reply(200, size=1 << 20, chunked=True, content_type="text/plain"))
    playbook = booking_playbook(tools=[create_visit(slot_updates={})])
    call = filled(Call(playbook))
    result = await runner_for(playbook, server).run_tool("create_visit", state=call.state, emit=call.emit)
    assert result is not None and result.ok
    assert len(result.data["text"]) == 1 << 20


async def test_non_json_body_becomes_text_data(server) -> None:
    server.route("POST", "/visits", Reply(502, text="<html>Bad gateway</html>"))
    playbook = booking_playbook(tools=[create_visit()])
    call = filled(Call(playbook))
    result = await runner_for(playbook, server).run_tool("create_visit", state=call.state, emit=call.emit)
    assert result is not None and not result.ok
    assert (result.status, result.data, result.error) == (502, {"text": "<html>Bad gateway</html>"}, "HTTP 502")


async def test_missing_slot_refuses_before_sending(server) -> None:
    server.route("POST", "/visits", Reply(200, json={}))
    playbook = booking_playbook(tools=[create_visit()], pipelines=book_pipeline(
        {"ok": "continue", "failed": {"retry": 3, "on_exhaust": "visit.handoff"}}))
    call = Call(playbook)
    call.write("patient_name", "Ana Lima", status="confirmed", by="caller")  # no day, no party
    runner = runner_for(playbook, server)

    result = await runner.run_tool("create_visit", state=call.state, emit=call.emit)
    assert result is not None and is_refused(result)
    assert "day" in (result.error or "")
    outcome = await runner.run_pipeline("book", state=call.state, emit=call.emit, hard_gate=False)
    assert outcome == PipelineOutcome(ok=False, route="visit.handoff", error_context="book:create_visit")
    assert server.requests == []
    assert call.of(ev.ToolCall) == []  # refused calls are not attempts
    assert len([r for r in call.of(ev.ToolResult) if r.tool == "create_visit"]) == 2  # never retried


async def test_hard_gate_refuses_a_provisional_value(server) -> None:
    server.route("POST", "/visits", Reply(201, json={"ref": "BK-1"}))
    playbook = booking_playbook(tools=[create_visit()], pipelines=book_pipeline({"ok": "visit.done"}))
    call = filled(Call(playbook))
    call.write("patient_name", "Anna Lima", status="provisional")
    runner = runner_for(playbook, server)

    outcome = await runner.run_pipeline("book", state=call.state, emit=call.emit, hard_gate=True)
    assert outcome == PipelineOutcome(ok=False, error_context="book:create_visit")
    [refused, marker] = call.of(ev.ToolResult)
    assert is_refused(refused)
    assert "patient_name not confirmed yet; read the value back" in (refused.error or "")
    assert (marker.tool, marker.store_as, marker.ok) == ("book", "pipeline", False)
    assert server.requests == []
    # A soft gate sends the same value.
    outcome = await runner.run_pipeline("book", state=call.state, emit=call.emit, hard_gate=False)
    assert outcome == PipelineOutcome(ok=True, route="visit.done")
    assert server.requests[0].json["name"] == "Anna Lima"


async def test_ssrf_target_is_refused_without_any_request() -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"no request may be sent, got {request.url}")

    playbook = booking_playbook(tools=[{"id": "meta", "url": "http://169.254.169.254/latest"},
                                       {"id": "local", "url": "http://0x7f.1:8080/{{ slots.party }}"}],
                                policies={"allow_hosts": []})
    call = filled(Call(playbook))
    async with httpx.AsyncClient(transport=httpx.MockTransport(fail)) as client:
        runner = ToolRunner(playbook, env={}, http_client=client)
        for tool in ("meta", "local"):
            result = await runner.run_tool(tool, state=call.state, emit=call.emit)
            assert result is not None and is_refused(result)
            assert (result.error or "").startswith("refused: blocked tool URL: address ")
    assert call.of(ev.ToolCall) == []


async def test_connection_goes_to_the_vetted_address_with_the_original_host(server) -> None:
    server.route("GET", "/slots", Reply(200, json={"free": ["10:00"]}))
    playbook = booking_playbook(
        tools=[{"id": "slots", "url": f"http://api.clinic.test:{server.port}/slots"}],
        policies={"allow_hosts": ["api.clinic.test"]},
    )
    call = Call(playbook)

    async def resolver(host: str, port: int) -> list[str]:
        assert host == "api.clinic.test"
        return ["127.0.0.1"]

    runner = ToolRunner(playbook, env={}, resolver=resolver)
    result = await runner.run_tool("slots", state=call.state, emit=call.emit)
    assert result is not None and result.ok and result.data == {"free": ["10:00"]}
    assert server.requests[0].header("host") == f"api.clinic.test:{server.port}"


async def test_run_once_and_when_skip_without_events(server) -> None:
    server.route("GET", "/slots", Reply(200, json={}))
    playbook = booking_playbook(tools=[
        {"id": "once", "url": "{{ env.API_BASE }}/slots", "run_once": True},
        {"id": "big_party", "url": "{{ env.API_BASE }}/slots", "when": "slots.party > 6"},
    ])
    call = filled(Call(playbook))
    runner = runner_for(playbook, server)
    assert await runner.run_tool("once", state=call.state, emit=call.emit) is not None
    before = len(call.log)
    assert await runner.run_tool("once", state=call.state, emit=call.emit) is None
    assert await runner.run_tool("big_party", state=call.state, emit=call.emit) is None
    assert len(call.log) == before
    call.write("party", 8)
    assert await runner.run_tool("big_party", state=call.state, emit=call.emit) is not None
    assert len(server.requests) == 2


# --- pipelines -------------------------------------------------------------------------------


async def test_500_retries_then_routes_on_exhaust(server) -> None:
    server.route("POST", "/visits", Reply(500, json={"error": "db down"}))
    playbook = booking_playbook(tools=[create_visit()], pipelines=book_pipeline(
        {"ok": "continue", "http_409": "visit.slot_taken",
         "failed": {"retry": 2, "on_exhaust": "visit.handoff"}}))
    call = filled(Call(playbook))
    outcome = await runner_for(playbook, server).run_pipeline(
        "book", state=call.state, emit=call.emit, hard_gate=True)
    assert outcome == PipelineOutcome(ok=False, route="visit.handoff", error_context="book:create_visit")
    assert len(server.requests) == 3
    assert [c.attempt for c in call.of(ev.ToolCall)] == [1, 2, 3]
    assert all(c.pipeline == "book" for c in call.of(ev.ToolCall))
    marker = call.of(ev.ToolResult)[-1]
    assert (marker.tool, marker.pipeline, marker.store_as, marker.ok) == ("book", "book", "pipeline", False)
    assert call.state.results["pipeline"].ok is False
    # Every attempt of the same call carries the same Idempotency-Key.
    assert len({r.header("idempotency-key") for r in server.requests}) == 1


def started_call(playbook: Playbook, session_id: str) -> Call:
    """A call with a session id, at visit.book (entered at some version), details filled."""
    call = Call(playbook)
    call.emit(ev.SessionStart(session_id=session_id, playbook_hash="h",
                              anchor="2026-11-30T09:00:00+00:00"))
    call.emit(ev.Advance(to="visit.book", rule_id="init", by="init"))
    return filled(call)


async def test_idempotency_key_differs_between_calls_that_post_the_same_body(server) -> None:
    # Two callers book the same details: an honouring server must not drop the second booking.
    server.route("POST", "/visits", Reply(201, json={"ref": "BK-1"}))
    playbook = booking_playbook(tools=[create_visit()])
    runner = runner_for(playbook, server)
    for session_id in ("call-a", "call-b"):
        call = started_call(playbook, session_id)
        result = await runner.run_tool("create_visit", state=call.state, emit=call.emit)
        assert result is not None and result.ok
    first, second = server.requests
    assert (first.json, first.path, first.query) == (second.json, second.path, second.query)
    assert first.header("idempotency-key") != second.header("idempotency-key")


async def test_idempotency_key_is_shared_by_retries_and_new_for_a_new_entry(server) -> None:
    server.route("POST", "/visits", Reply(503), Reply(201, json={"ref": "BK-7"}))
    playbook = booking_playbook(tools=[create_visit()], pipelines=book_pipeline(
        {"ok": "visit.done", "failed": {"retry": 2, "on_exhaust": "visit.handoff"}}))
    runner = runner_for(playbook, server)
    call = started_call(playbook, "call-a")
    outcome = await runner.run_pipeline("book", state=call.state, emit=call.emit, hard_gate=True)
    assert outcome.ok and len(server.requests) == 2
    retry_keys = {r.header("idempotency-key") for r in server.requests}
    assert len(retry_keys) == 1  # the retry of one step carries the same key
    # The same call enters the step again (e.g. after slot_taken): a new booking, a new key.
    call.emit(ev.Advance(from_="visit.book", to="visit.slot_taken", rule_id="r", by="expr"))
    call.emit(ev.Advance(from_="visit.slot_taken", to="visit.book", rule_id="r", by="director"))
    assert await runner.run_tool("create_visit", state=call.state, emit=call.emit) is not None
    assert server.requests[-1].header("idempotency-key") not in retry_keys


async def test_retry_succeeds_on_a_later_attempt(server) -> None:
    server.route("POST", "/visits", Reply(503), Reply(201, json={"ref": "BK-7"}))
    playbook = booking_playbook(tools=[create_visit()], pipelines=book_pipeline(
        {"ok": "visit.done", "failed": {"retry": 2, "on_exhaust": "visit.handoff"}}))
    call = filled(Call(playbook))
    outcome = await runner_for(playbook, server).run_pipeline(
        "book", state=call.state, emit=call.emit, hard_gate=True)
    assert outcome == PipelineOutcome(ok=True, route="visit.done")
    assert len(server.requests) == 2
    assert call.state.slots["booking_ref"].value == "BK-7"


async def test_409_branch_routes_after_one_attempt(server) -> None:
    server.route("POST", "/visits", Reply(409, json={"error": "taken"}))
    playbook = booking_playbook(tools=[create_visit()], pipelines=book_pipeline(
        {"ok": "continue", "http_409": "visit.slot_taken",
         "failed": {"retry": 2, "on_exhaust": "visit.handoff"}}))
    call = filled(Call(playbook))
    outcome = await runner_for(playbook, server).run_pipeline(
        "book", state=call.state, emit=call.emit, hard_gate=True)
    assert outcome == PipelineOutcome(ok=False, route="visit.slot_taken", error_context=None)
    assert len(server.requests) == 1


async def test_retry_spec_under_ok_does_not_retry_successes(server) -> None:
    server.route("POST", "/visits", Reply(200, json={"ref": "R"}))
    server.route("GET", "/confirm", Reply(200, json={}))
    playbook = booking_playbook(
        tools=[create_visit(), {"id": "confirm", "url": "{{ env.API_BASE }}/confirm"}],
        pipelines=[{"id": "book", "steps": [
            {"tool": "create_visit", "on": {"ok": {"retry": 3}}},
            {"tool": "confirm"},
        ]}])
    call = filled(Call(playbook))
    outcome = await runner_for(playbook, server).run_pipeline(
        "book", state=call.state, emit=call.emit, hard_gate=False)
    assert outcome == PipelineOutcome(ok=True)
    assert [r.path for r in server.requests] == ["/visits", "/confirm"]


async def test_failure_without_a_branch_stops_the_pipeline(server) -> None:
    server.route("POST", "/visits", Reply(404, json={}))
    server.route("GET", "/confirm", Reply(200, json={}))
    playbook = booking_playbook(
        tools=[create_visit(), {"id": "confirm", "url": "{{ env.API_BASE }}/confirm"}],
        pipelines=[{"id": "book", "steps": [{"tool": "create_visit"}, {"tool": "confirm"}]}])
    call = filled(Call(playbook))
    outcome = await runner_for(playbook, server).run_pipeline(
        "book", state=call.state, emit=call.emit, hard_gate=False)
    assert outcome == PipelineOutcome(ok=False, error_context="book:create_visit")
    assert [r.path for r in server.requests] == ["/visits"]


async def test_middleware_refreshes_the_token_and_replays(server) -> None:
    def availability(request: RecordedRequest) -> Reply:
        if request.header("authorization") == "Bearer tok-2":
            return Reply(200, json={"slots": ["09:00"]})
        return Reply(401, json={"error": "expired"})

    server.route("GET", "/availability", handler=availability)
    server.route("POST", "/token", Reply(200, json={"access_token": "tok-2", "expires_in": 60}))
    playbook = booking_playbook(
        tools=[
            {"id": "availability", "url": "{{ env.API_BASE }}/availability",
             "headers": {"Authorization": "Bearer {{ env.API_KEY }}"}, "store_response_as": "avail"},
            {"id": "refresh_token", "method": "POST", "url": "{{ env.API_BASE }}/token",
             "env_updates": {"API_KEY": "access_token"}},
        ],
        middleware={"on_status": 401, "refresh_with": "refresh_token"},
        pipelines=[{"id": "check", "steps": [{"tool": "availability", "on": {"ok": "continue"}}]}],
    )
    call = Call(playbook)
    env = {"API_BASE": server.base_url, "API_KEY": "tok-1"}
    runner = ToolRunner(playbook, env=env, retry_backoff=0.0)

    outcome = await runner.run_pipeline("check", state=call.state, emit=call.emit, hard_gate=False)

    assert outcome == PipelineOutcome(ok=True)
    assert env["API_KEY"] == "tok-2"
    assert [(r.path, r.header("authorization")) for r in server.requests] == [
        ("/availability", "Bearer tok-1"), ("/token", None), ("/availability", "Bearer tok-2")]
    kinds = [(type(e).__name__, getattr(e, "tool", getattr(e, "key", None))) for e in call.log]
    assert kinds == [
        ("ToolCall", "availability"), ("ToolResult", "availability"),
        ("ToolCall", "refresh_token"), ("ToolResult", "refresh_token"),
        ("EnvWrite", "API_KEY"),
        ("ToolCall", "availability"), ("ToolResult", "availability"),
        ("ToolResult", "check"),
    ]
    assert call.of(ev.EnvWrite)[0].by == "tool:refresh_token"
    assert call.state.results["avail"].data == {"slots": ["09:00"]}
    assert "tok-2" not in call.jsonl() and "tok-1" not in call.jsonl()


async def test_failed_refresh_does_not_replay(server) -> None:
    server.route("GET", "/availability", Reply(401, json={}))
    server.route("POST", "/token", Reply(500, json={}))
    playbook = booking_playbook(
        tools=[{"id": "availability", "url": "{{ env.API_BASE }}/availability"},
               {"id": "refresh_token", "method": "POST", "url": "{{ env.API_BASE }}/token",
                "env_updates": {"API_KEY": "access_token"}}],
        middleware={"refresh_with": "refresh_token"},
    )
    call = Call(playbook)
    result = await runner_for(playbook, server).run_tool("availability", state=call.state, emit=call.emit)
    assert result is not None and result.status == 401
    assert [r.path for r in server.requests] == ["/availability", "/token"]


def dental_over_http() -> Playbook:
    """playbooks/dental_booking.yaml with the HTTP booking tool of the shared example (the
    repo's copy books through a python tool so it runs without a server)."""
    doc = load_yaml((PLAYBOOKS / "dental_booking.yaml").read_text())
    doc["env"] = {"API_BASE": "${CLINIC_API_BASE}", "API_TOKEN": "${CLINIC_API_TOKEN}"}
    doc["policies"]["allow_hosts"] = ["127.0.0.1", "localhost"]
    doc["tools"] = [{
        "id": "create_visit", "type": "http", "method": "POST",
        "url": "{{ env.API_BASE }}/clinics/{{ slots.clinic_id }}/visits",
        "headers": {"Authorization": "Bearer {{ env.API_TOKEN }}"},
        "body": {"name": "{{ slots.patient_name }}", "phone": "{{ slots.phone }}",
                 "start": "{{ slots.day }}T{{ slots.time }}", "reason": "{{ slots.reason }}"},
        "store_response_as": "visit", "slot_updates": {"booking_ref": "ref"}, "timeout": 5,
    }]
    return Playbook.from_dict(doc)


def dental_call(playbook: Playbook) -> Call:
    call = Call(playbook)
    call.write("clinic_id", "c-1", status="confirmed", by="call_start")
    for key, value in [("patient_name", "Ana Lima"), ("phone", "+4930123456"),
                       ("day", "2026-12-01"), ("time", "10:30")]:
        call.write(key, value, status="confirmed", by="caller")
    return call


async def test_dental_example_books_through_its_pipeline(server) -> None:
    playbook = dental_over_http()
    server.route("POST", "/clinics/c-1/visits", Reply(201, json={"ref": "4711"}))
    call = dental_call(playbook)
    runner = ToolRunner(playbook, env={"API_BASE": server.base_url, "API_TOKEN": "tok-d"})
    outcome = await runner.run_pipeline("book_visit", state=call.state, emit=call.emit, hard_gate=True)
    assert outcome == PipelineOutcome(ok=True)
    [sent] = server.requests
    # The unset optional enum slot `reason` is a single-expression leaf: it is sent as null.
    assert sent.json == {"name": "Ana Lima", "phone": "+4930123456", "start": "2026-12-01T10:30",
                         "reason": None}
    assert sent.header("authorization") == "Bearer tok-d"
    assert call.state.slots["booking_ref"].value == "4711"


async def test_dental_example_routes_a_taken_slot_and_exhausts_on_errors(server) -> None:
    playbook = dental_over_http()
    server.route("POST", "/clinics/c-1/visits", Reply(409, json={}))
    call = dental_call(playbook)
    runner = ToolRunner(playbook, env={"API_BASE": server.base_url, "API_TOKEN": "tok-d"},
                        retry_backoff=0.0)
    outcome = await runner.run_pipeline("book_visit", state=call.state, emit=call.emit, hard_gate=True)
    assert outcome == PipelineOutcome(ok=False, route="visit.slot_taken")
    server.route("POST", "/clinics/c-1/visits", Reply(503, json={}))
    outcome = await runner.run_pipeline("book_visit", state=call.state, emit=call.emit, hard_gate=True)
    assert outcome == PipelineOutcome(ok=False, route="visit.handoff", error_context="book_visit:create_visit")
    assert len(server.requests) == 1 + 3


# --- python tools ----------------------------------------------------------------------------


def python_playbook() -> Playbook:
    return booking_playbook(
        tools=[{"id": "capture", "type": "python", "args": {"amount": {"type": "int"}},
                "store_response_as": "capture", "slot_updates": {"booking_ref": "ref"}},
               {"id": "explode", "type": "python"}],
        pipelines=[{"id": "payment", "steps": [{"tool": "capture", "on": {"ok": "visit.done"}}]},
                   {"id": "boom", "steps": [{"tool": "explode", "on": {"failed": "visit.handoff"}}]}],
    )


async def test_python_tool_gets_handler_args_and_state() -> None:
    seen: list[tuple[dict[str, Any], Any]] = []

    async def capture(args: dict[str, Any], state: ConversationState) -> dict[str, Any]:
        seen.append((args, state.slots["party"].value))
        return {"ref": f"PAY-{args['amount']}"}

    playbook = python_playbook()
    call = filled(Call(playbook))
    runner = ToolRunner(playbook, env={}, python_tools={"capture": capture})
    outcome = await runner.run_pipeline("payment", state=call.state, emit=call.emit,
                                        hard_gate=False, args={"amount": "12", "currency": "EUR"})
    assert outcome == PipelineOutcome(ok=True, route="visit.done")
    assert seen == [({"amount": 12, "currency": "EUR"}, 4)]
    assert call.of(ev.ToolCall)[0].args == {"amount": 12, "currency": "EUR"}
    assert call.state.results["capture"].data == {"ref": "PAY-12"}
    assert call.state.slots["booking_ref"].value == "PAY-12"


async def test_python_tool_exception_is_a_failed_result_and_routes() -> None:
    def explode(args: dict[str, Any]) -> None:
        raise ValueError("card declined")

    playbook = python_playbook()
    call = Call(playbook)
    runner = ToolRunner(playbook, env={}, python_tools={"explode": explode})
    outcome = await runner.run_pipeline("boom", state=call.state, emit=call.emit, hard_gate=False)
    assert outcome == PipelineOutcome(ok=False, route="visit.handoff")
    assert call.of(ev.ToolResult)[0].error == "ValueError: card declined"


async def test_unregistered_python_tool_and_bad_args_are_refused() -> None:
    playbook = python_playbook()
    call = Call(playbook)
    runner = ToolRunner(playbook, env={}, python_tools={"capture": lambda args: args})
    missing = await runner.run_tool("explode", state=call.state, emit=call.emit)
    assert missing is not None and is_refused(missing)
    assert "python tool not registered: explode" in (missing.error or "")
    for amount in ("lots", 2.5, True):
        bad = await runner.run_tool("capture", state=call.state, emit=call.emit, args={"amount": amount})
        assert bad is not None and is_refused(bad)
        assert f"'amount'={amount!r} is not a int" in (bad.error or "")
    assert attempts_made(call) == 0


def attempts_made(call: Call) -> int:
    """How many python tool calls were actually made (refusals make none)."""
    return len(call.of(ev.ToolCall))


def test_python_tool_signatures_are_bound_once() -> None:
    def two(args, state): ...
    def one(args): ...
    def keywords(*, date: str, party: int = 2): ...
    def needs_context(context, date: str): ...

    assert bind_python_tool("a", two).style == "args_state"
    assert bind_python_tool("b", one).style == "args"
    bound = bind_python_tool("c", keywords)
    assert (bound.style, bound.accepted) == ("kwargs", frozenset({"date", "party"}))
    with pytest.raises(ValueError, match="parameter 'context' needs a LiveKit RunContext"):
        bind_python_tool("d", needs_context)
    with pytest.raises(ValueError, match="is not callable"):
        bind_python_tool("e", "not a function")  # type: ignore[arg-type]


async def test_livekit_function_tool_is_called_with_keyword_args() -> None:
    from livekit.agents import llm

    @llm.function_tool
    async def capture(amount: int, context: llm.RunContext | None = None) -> dict[str, Any]:
        """Capture a payment."""
        return {"ref": f"LK-{amount}"}

    playbook = python_playbook()
    call = Call(playbook)
    runner = ToolRunner(playbook, env={}, python_tools={"capture": capture})
    result = await runner.run_tool("capture", state=call.state, emit=call.emit,
                                   args={"amount": 7, "ignored": True})
    assert result is not None and result.ok and result.data == {"ref": "LK-7"}


async def test_slow_async_python_tool_times_out_and_odd_data_fails_clearly() -> None:
    async def slow(args: dict[str, Any]) -> None:
        await asyncio.sleep(5)

    def odd(args: dict[str, Any]) -> Any:
        if args.get("inf"):
            return {"n": float("inf")}  # JSON has no Infinity: refused, not stored as null
        return {1: 1.5, "when": object}  # keys become strings, a class becomes its str

    playbook = booking_playbook(tools=[{"id": "slow", "type": "python", "timeout": 0},
                                       {"id": "odd", "type": "python"}])
    call = Call(playbook)
    runner = ToolRunner(playbook, env={}, python_tools={"slow": slow, "odd": odd})
    result = await runner.run_tool("slow", state=call.state, emit=call.emit)
    assert result is not None and result.error == "timeout after 0.1 s"  # clamped up from 0
    result = await runner.run_tool("odd", state=call.state, emit=call.emit)
    assert result is not None and result.ok
    assert result.data == {"1": 1.5, "when": str(object)}
    result = await runner.run_tool("odd", args={"inf": True}, state=call.state, emit=call.emit)
    assert result is not None and not result.ok and result.data is None
    assert result.error is not None and "results.odd.n: inf is not a finite number" in result.error


@pytest.mark.parametrize(
    ("key", "secret"),
    [("api_key", True), ("X-Auth-Token", True), ("clientSecret", True), ("password", True),
     ("pin", True), ("accessKey", True), ("Authorization", True), ("author", False),
     ("shipping", False), ("name", False), ("options", False), ("session_id", False)],
)
def test_secret_key_names_are_recognised_by_whole_words(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_logged_urls_hide_userinfo_secret_params_and_env_values() -> None:
    env = {"API_BASE": "https://api.example.com", "SHORT": "x"}
    assert redact_url("https://bob:pw@api.example.com/v1?token=abc&day=mon#f", env) == (
        "https://***@api.example.com/v1?token=***&day=mon")
    assert redact_url("https://api.example.com/v1?q=x", env) == "<env.API_BASE>/v1?q=x"


async def test_redirects_are_never_followed_even_by_a_client_that_would(server) -> None:
    # The target is loopback so that even a regression never leaves the machine.
    server.route("GET", "/moved", Reply(302, headers={"Location": server.url("/internal")}))
    server.route("GET", "/internal", Reply(200, json={"secret": "x"}))
    playbook = booking_playbook(tools=[{"id": "moved", "url": "{{ env.API_BASE }}/moved"}])
    call = Call(playbook)
    async with httpx.AsyncClient(follow_redirects=True, trust_env=False) as client:
        result = await runner_for(playbook, server, http_client=client).run_tool(
            "moved", state=call.state, emit=call.emit)
    assert result is not None and (result.ok, result.status, result.error) == (False, 302, "HTTP 302")
    assert len(server.requests) == 1


async def test_a_hanging_dns_lookup_is_bounded_by_the_tool_timeout() -> None:
    async def hanging(host: str, port: int) -> list[str]:
        await asyncio.sleep(10)
        return ["93.184.216.34"]

    async def unknown(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")

    playbook = booking_playbook(tools=[{"id": "slots", "url": "https://api.example.com/slots",
                                        "timeout": 0.2}])
    call = Call(playbook)
    result = await ToolRunner(playbook, env={}, resolver=hanging).run_tool(
        "slots", state=call.state, emit=call.emit)
    assert result is not None and result.error == "timeout after 0.2 s resolving the host"
    result = await ToolRunner(playbook, env={}, resolver=unknown).run_tool(
        "slots", state=call.state, emit=call.emit)
    assert result is not None and not is_refused(result)  # DNS can recover: a retry may help
    assert result.error == "cannot resolve host 'api.example.com': Name or service not known"


_plain_keys = st.sampled_from(["name", "day", "party", "note", "items", "author", "shipping"])
_secret_keys = st.sampled_from(["password", "api_key", "X-Auth-Token", "clientSecret", "pin",
                                "refresh_token", "Authorization", "otp"])


@given(st.recursive(
    st.text(min_size=0, max_size=8) | st.integers(),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(_plain_keys, inner, max_size=3)
    | st.dictionaries(_secret_keys, st.just("SECRET-VALUE-1"), min_size=1, max_size=2)
    .flatmap(lambda secrets: st.dictionaries(_plain_keys, inner, max_size=2)
             .map(lambda plain: {**plain, **secrets})),
    max_leaves=12,
))
def test_redacted_bodies_never_contain_secret_values_or_env_values(body: Any) -> None:
    env = {"API_TOKEN": "ENV-VALUE-77"}
    logged = json.dumps(redact_body({"wrapper": body, "note": "ENV-VALUE-77 inside"}, env))
    assert "SECRET-VALUE-1" not in logged
    assert "ENV-VALUE-77" not in logged
