"""The real local model (SmolLM2-135M on llama.cpp, 127.0.0.1) as Talker and Director.

Three caller turns through ``DialogMachineLLM`` in a real ``AgentSession`` (text mode) over
``playbooks/dental_booking.yaml`` with ``talker="local/smollm2-135m"`` and the default director
(the same model, one llama.cpp server answering both roles in turn; ``chat`` and
``test_cli_chat.py`` cover one server per role): every
Director call must come back as JSON that validates against that turn's verdict schema and
parses as a verdict on the first attempt, the Talker must say something each turn, and the
log must round-trip. A 135M model's wording and slot values are not asserted, only structure.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import jsonschema
import pytest
from livekit.agents import AgentSession
from superdialog_core import Playbook
from superdialog_core.events import Degraded, Utterance, Verdict
from superdialog_core.log.eventlog import EventLog
from superdialog_core.log.state import ConversationState
from superdialog_core.roles.director import parse_verdict

from superdialog_livekit import DialogAgent, DialogMachineLLM
from superdialog_livekit.adapters import LiveKitDirector, LiveKitTalker, model_hints
from superdialog_livekit.uris import llm_from_uri

pytestmark = pytest.mark.local_model

ROOT = Path(__file__).resolve().parents[1]
PLAYBOOK = ROOT / "playbooks" / "dental_booking.yaml"
MODEL = "local/smollm2-135m"
TURNS = ["hi", "I would like a check-up", "My name is Anna Schmidt, Tuesday at ten works."]
# Director degradations about what a verdict *means* (a 135M model's values are often wrong);
# anything else (unparseable, bad field, unknown slot or target, timeout, error) fails the test.
# A fixed date anchor: the prompts read the same on every run (the Director decodes greedily).
NOW = datetime(2026, 12, 1, 9, 30, tzinfo=ZoneInfo("Europe/Berlin"))
SEMANTIC = ("anchor_miss:", "confirm_refused:", "meta_instruction:", "interrupt_to_current:")


def _python_tools() -> dict[str, Any]:
    path = PLAYBOOK.with_name("dental_booking_tools.py")
    spec = importlib.util.spec_from_file_location("dental_booking_tools_for_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.TOOLS)


@pytest.fixture(scope="module")
def local_servers() -> Any:
    """Start the llama.cpp server once for this module (DialogMachineLLM reuses it)."""
    server = llm_from_uri(MODEL, role="talker").local_server
    yield server
    server.stop()


class _Recorder:
    """Wraps the Director adapter DialogMachineLLM built: keeps each request and raw answer."""

    def __init__(self, director: LiveKitDirector) -> None:
        self.director = director
        self.decide_inner = director.decide
        self.calls: list[tuple[Any, Any]] = []

    async def decide(self, request: Any) -> Any:
        raw = await self.decide_inner(request)
        self.calls.append((request, raw))
        return raw


async def test_three_turns_with_the_real_local_model(local_servers: Any) -> None:
    dialog = DialogMachineLLM(PLAYBOOK, talker=MODEL,
                              python_tools=_python_tools(), call={"channel": "web"},
                              director_timeout=90.0, now=NOW)
    # The local URI marks the model for JSON verdicts and short replies.
    assert isinstance(dialog._talker, LiveKitTalker)
    assert isinstance(dialog._director, LiveKitDirector)
    hints = model_hints(dialog._director.llm)
    assert hints is not None and hints.json_verdicts and hints.director_max_tokens
    assert model_hints(dialog._talker.llm).talker_max_tokens  # type: ignore[union-attr]
    assert dialog._director.llm.local_server.port == local_servers.port
    recorder = _Recorder(dialog._director)
    dialog._director.decide = recorder.decide  # type: ignore[method-assign]

    replies: list[str] = []
    async with AgentSession(llm=dialog, vad=None, turn_handling={"turn_detection": None},
                            user_away_timeout=None) as session:
        opening = await session.start(DialogAgent(dialog, on_end="none"), capture_run=True)
        assert opening is not None
        for text in TURNS:
            result = await session.run(user_input=text)
            said = [e.item.text_content or "" for e in result.events
                    if getattr(e.item, "type", None) == "message" and e.item.role == "assistant"]
            replies.append(" ".join(said))
            await dialog.runtime.wait_idle()  # this turn's decision lands before the next turn
            if dialog.runtime.state.ended:
                break
    rt = dialog.runtime
    log = list(rt.log)
    users = [e for e in log if isinstance(e, Utterance) and e.role == "user"]
    assert len(users) >= 3, f"only {len(users)} caller turns ran"

    # Every Director call: JSON text (asked through response_format), valid against the schema
    # sent for that turn, and a verdict the engine's parser accepts.
    assert len(recorder.calls) == len(users)
    for request, raw in recorder.calls:
        assert isinstance(raw, str), raw
        answer = json.loads(raw)
        jsonschema.validate(answer, request.schema)
        assert isinstance(parse_verdict(raw), dict)
    verdicts = [e for e in log if isinstance(e, Verdict)]
    assert [v.user_version for v in verdicts] == [u.version for u in users]
    assert all(v.attempts == 1 for v in verdicts), [v.attempts for v in verdicts]
    bad = [e.detail for e in log if isinstance(e, Degraded) and e.component == "director"
           and not e.detail.startswith(SEMANTIC)]
    assert not bad, bad

    # The Talker spoke each turn: a non-empty reply in LiveKit and a talker line in the log.
    assert all(r.strip() for r in replies), replies
    bounds = [u.version for u in users] + [rt.log.version + 1]
    for start, end in itertools.pairwise(bounds):
        spoken = [e for e in log if isinstance(e, Utterance) and e.role == "assistant"
                  and e.kind == "talker" and start < e.version < end and e.text.strip()]
        assert spoken, f"no Talker speech after the caller's turn at version {start}"
    assert not [e.detail for e in log if isinstance(e, Degraded) and e.component == "talker"]

    # The log round-trips: JSONL and back folds to the same state as the live one.
    playbook = Playbook.load(PLAYBOOK)
    text = rt.log.to_jsonl()
    again = EventLog.from_jsonl(text)
    assert again.to_jsonl() == text
    assert ConversationState.fold(again, playbook) == ConversationState.fold(rt.log, playbook)
    assert ConversationState.fold(again, playbook) == rt.state
    await dialog.aclose()
