"""Views, clock and call-start defaults render in every spoken line (SPEC §2.2, §3, §4.4).

Guidance always read views; a verbatim line, an exit line and a silence prompt spoke an empty
string where they read one. These tests run a real ``Runtime`` with scripted models.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from superdialog_core import Playbook, Runtime, ScriptedDirector, ScriptedTalker
from superdialog_core import events as ev

NOW = datetime(2026, 11, 30, 9, 5, tzinfo=ZoneInfo("UTC"))

BOOK = """
call_start:
  customer: {type: str, default: "Ms Okafor"}
  plan: {type: str}
guidelines: {timezone: Europe/Berlin}
views:
  who: "slots.customer"
  greeting_plan: "slots.plan or 'basic'"
policies:
  silence: {max_prompts: 1, prompts: ["{{ views.who }}, are you still there?"], then: b.gone}
journeys:
  b:
    checkpoints:
      - id: hello
        say_verbatim: "Hello {{ views.who }}, your plan is {{ views.greeting_plan }}. It is {{ clock.time }} on {{ clock.weekday }}."
        exit_say: "Thanks, {{ views.who }}."
        advance_when: [{id: go, when: caller is ready, to: b.ask}]
      - id: ask
        goal: Ask what they need
      - id: gone
        terminal: true
        say_verbatim: "Goodbye {{ views.who }}, it was {{ clock.date }}."
"""


def runtime(playbook: Playbook, verdicts: list[dict], **kw: object) -> Runtime:
    return Runtime(playbook, ScriptedDirector(verdicts), ScriptedTalker(["Sure.", "Okay."]),  # type: ignore[arg-type]
                   now=NOW, **kw)  # type: ignore[arg-type]


async def test_a_verbatim_line_reads_views_clock_and_a_call_start_default() -> None:
    rt = runtime(Playbook.from_yaml(BOOK), [])
    opening = await rt.start()
    # 09:05 UTC is 10:05 in Berlin; the default fills the call-start value nobody passed.
    assert opening.text == "Hello Ms Okafor, your plan is basic. It is 10:05 on Monday."
    [write] = [e for e in rt.log if isinstance(e, ev.SlotWrite) and e.key == "customer"]
    assert (write.value, write.by) == ("Ms Okafor", "call_start")


async def test_a_passed_call_start_value_wins_over_the_default() -> None:
    rt = runtime(Playbook.from_yaml(BOOK), [], call_start={"customer": "Dr Lee", "plan": "gold"})
    opening = await rt.start()
    assert opening.text.startswith("Hello Dr Lee, your plan is gold.")


async def test_an_exit_line_reads_views() -> None:
    rt = runtime(Playbook.from_yaml(BOOK), [{"advance": "b.ask"}])
    await rt.start()
    await rt.user_turn("yes, go ahead")
    await rt.wait_idle()
    assert rt.state.checkpoint == "b.ask"
    lines = [e.text for e in rt.log if isinstance(e, ev.Utterance) and e.role == "assistant"
             and e.kind == "verbatim"]
    assert "Thanks, Ms Okafor." in lines


async def test_a_silence_prompt_and_a_closing_line_read_views() -> None:
    rt = runtime(Playbook.from_yaml(BOOK), [])
    await rt.start()
    prompt = await rt.external("silence", "user_away")
    assert prompt.text == "Ms Okafor, are you still there?"
    closing = await rt.external("silence", "user_away")
    assert closing.text == "Goodbye Ms Okafor, it was 2026-11-30."


async def test_a_flow_env_key_only_speech_reads_is_spoken_from_its_default(tmp_path: Path) -> None:
    flow = {
        "system_prompt": "You are the clinic's assistant.",
        "initial_node": "greet",
        "env_vars": [{"key": "clinic_name", "value": "Lakeside"}],
        "nodes": [{"id": "greet", "name": "Greet", "static_text": "Welcome to {{clinic_name}}, {{ name|default('there') }}.",
                   "edges": [{"id": "bye", "condition": "done", "target_node_id": "end"}]},
                  {"id": "end", "name": "End", "is_final": True, "static_text": "Bye."}],
    }
    path = tmp_path / "flow.json"
    path.write_text(json.dumps(flow))
    playbook = Playbook.load(path)
    assert playbook.env == {}
    assert playbook.call_start["clinic_name"].default == "Lakeside"
    assert playbook.coverage_gaps == []
    assert (await runtime(playbook, []).start()).text == "Welcome to Lakeside, there."
    rt = runtime(playbook, [], call_start={"clinic_name": "Hillside", "name": "Ana"})
    assert (await rt.start()).text == "Welcome to Hillside, Ana."
