"""The plugin hands the engine LiveKit's tracer provider: a LiveKit user who calls
``livekit.agents.telemetry.set_tracer_provider`` gets the engine's spans in the same exporter
(SPEC §11), from a real text-mode ``AgentSession``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from livekit.agents import AgentSession, telemetry
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from superdialog_core import Playbook

from superdialog_livekit import DialogAgent, DialogMachineLLM
from tests.livekit_scripted import DirectorLLM, TalkerLLM

PLAYBOOK = """
journeys:
  main:
    checkpoints:
      - id: ask
        say_verbatim: "Welcome! How many are you?"
        slots:
          party_size: {type: int, required: true}
        advance_when:
          - {id: got, when: "slots.party_size", judge: expr, to: main.done}
      - {id: done, say_verbatim: "Booked. Goodbye!", terminal: true, outcome: booked}
"""


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    previous = telemetry.tracer._tracer_provider
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.set_tracer_provider(provider)
    yield exporter
    telemetry.tracer.set_provider(previous)  # later tests trace nowhere again
    provider.shutdown()


async def test_livekit_s_exporter_receives_the_engine_s_spans(exporter: InMemorySpanExporter) -> None:
    dialog = DialogMachineLLM(Playbook.from_yaml(PLAYBOOK), talker=TalkerLLM(["Lovely."]),
                              director=DirectorLLM([{"slots": {"party_size": 4}}]))
    async with AgentSession(llm=dialog, vad=None, turn_handling={"turn_detection": None}) as session:
        await session.start(DialogAgent(dialog, on_end="none"))
        await session.run(user_input="we are four")
        await asyncio.wait_for(dialog.runtime.wait_idle(), 5)
    spans = exporter.get_finished_spans()
    ours = [s for s in spans if s.name.startswith("superdialog.")]
    names = {s.name for s in ours}
    assert {"superdialog.opening", "superdialog.turn", "superdialog.director"} <= names
    turn = next(s for s in ours if s.name == "superdialog.turn")
    assert turn.attributes["superdialog.outcome"] == "booked"
    assert "main.ask->main.done" in turn.attributes["superdialog.advance"]
    assert any(s.name.startswith("llm") or s.name.startswith("agent") for s in spans)  # LiveKit's own
