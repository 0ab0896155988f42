"""OpenTelemetry spans (SPEC §11): one per turn, the Director call, each Talker segment and
each tool call as children; checkpoint, advance, outcome and degradations as attributes, never
an env value or a slot value."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loopback import LoopbackServer, Reply
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from superdialog_core import Playbook, Runtime, ScriptedDirector, ScriptedTalker

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "failover_booking.yaml"
SECRET_BASE_PATH = "/tenant-7f3a"  # part of the env value: must never show in a span


@pytest.fixture
def booking(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackServer]:
    with LoopbackServer() as server:
        server.route("POST", f"{SECRET_BASE_PATH}/bookings", Reply(201, json={"ref": "B1"}))
        monkeypatch.setenv("BOOKING_BASE", server.base_url + SECRET_BASE_PATH)
        yield server


@pytest.fixture
def spans() -> Iterator[tuple[Any, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("test"), exporter
    provider.shutdown()


def children(of: ReadableSpan, every: list[ReadableSpan]) -> list[ReadableSpan]:
    return [s for s in every if s.parent is not None and s.parent.span_id == of.context.span_id]


def all_values(span: ReadableSpan) -> list[str]:
    values: list[str] = []
    for value in (span.attributes or {}).values():
        values.extend(str(v) for v in value) if isinstance(value, tuple) else values.append(str(value))
    return values


async def test_a_turn_span_holds_director_talker_and_tool_spans(spans, booking) -> None:
    tracer, exporter = spans
    director = ScriptedDirector([
        {"slots": {"name": "Ada Lovelace"}, "advance": "visit.day"},
        {"slots": {"day": "next Tuesday"}, "advance": "visit.book"},
        RuntimeError("model down"),
    ])
    rt = Runtime(Playbook.load(FIXTURE), director, ScriptedTalker(["Hi Ada.", "Which day?", "Done.", "Ok."]),
                 tracer=tracer, session_id="traced-1")
    await rt.start()
    await rt.user_turn("This is Ada Lovelace")
    await rt.user_turn("Next Tuesday please")
    await rt.user_turn("hmm")
    await rt.wait_idle()
    finished = list(exporter.get_finished_spans())
    turns = [s for s in finished if s.name == "superdialog.turn"]
    assert [s.name for s in finished if s.parent is None] == [
        "superdialog.opening", "superdialog.turn", "superdialog.turn", "superdialog.turn"]

    booked = turns[1]
    kids = children(booked, finished)
    names = [s.name for s in kids]
    assert names.count("superdialog.director") == 1 and "superdialog.talker" in names
    tool = next(s for s in kids if s.name == "superdialog.tool")
    assert tool.attributes["superdialog.tool"] == "book_visit"
    assert tool.attributes["superdialog.tool.ok"] is True
    assert tool.attributes["http.response.status_code"] == 201
    assert booked.attributes["superdialog.checkpoint.before"] == "visit.day"
    assert booked.attributes["superdialog.checkpoint"] == "visit.wrap_up"
    assert "visit.day->visit.book" in booked.attributes["superdialog.advance"]
    assert "visit.book->visit.wrap_up" in booked.attributes["superdialog.advance"]
    assert booked.attributes["superdialog.degraded_count"] == 0
    talker = next(s for s in kids if s.name == "superdialog.talker")
    assert talker.attributes["superdialog.talker.purpose"] == "reply"
    assert talker.attributes["superdialog.talker.chars"] > 0

    failed = turns[2]  # the Director raised: a degradation, named by its component only
    assert failed.attributes["superdialog.degradations"] == ("director",)
    assert "superdialog.director" in [s.name for s in children(failed, finished)]

    # Never a slot value, an env value or what anyone said.
    for span in finished:
        for value in all_values(span):
            for secret in ("Ada", "Tuesday", SECRET_BASE_PATH, booking.base_url, "Which day"):
                assert secret not in value, (span.name, value)


async def test_an_ended_call_carries_its_outcome(spans, booking) -> None:
    tracer, exporter = spans
    director = ScriptedDirector([
        {"slots": {"name": "Ada Lovelace"}, "advance": "visit.day"},
        {"slots": {"day": "next Tuesday"}, "advance": "visit.book"},
        {"advance": "visit.done"},
    ])
    rt = Runtime(Playbook.load(FIXTURE), director, ScriptedTalker(["a", "b", "c", "d"]), tracer=tracer)
    await rt.start()
    for text in ("This is Ada Lovelace", "Next Tuesday please", "No that is all"):
        await rt.user_turn(text)
    await rt.wait_idle()
    last = [s for s in exporter.get_finished_spans() if s.name == "superdialog.turn"][-1]
    assert last.attributes["superdialog.outcome"] == "booked"
    assert last.attributes["superdialog.ended"] is True
    assert last.attributes["superdialog.end_reason"] == "terminal:visit.done"


GLOBAL_PROVIDER = """
import asyncio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from superdialog_core import Runtime, ScriptedDirector, ScriptedTalker

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
rt = Runtime(PLAYBOOK, ScriptedDirector([{}]), ScriptedTalker(["Hi.", "Sure."]))
async def main():
    await rt.start()
    await rt.user_turn("hello")
    await rt.wait_idle()
asyncio.run(main())
print(sorted({(s.name, s.instrumentation_scope.name) for s in exporter.get_finished_spans()}))
"""


def test_without_a_tracer_the_global_provider_s_is_used() -> None:
    import subprocess
    import sys

    code = GLOBAL_PROVIDER.replace("PLAYBOOK", repr(str(FIXTURE.parent / "simple_booking.yaml")))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(sorted({
        ("superdialog.opening", "superdialog_core"), ("superdialog.turn", "superdialog_core"),
        ("superdialog.director", "superdialog_core"), ("superdialog.talker", "superdialog_core"),
    }))
