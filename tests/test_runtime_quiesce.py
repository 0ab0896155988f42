"""Quiescence (SPEC §6.4): pipelines once per entry, expr rules, auto checkpoints, hop limit."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from superdialog_core import Playbook, Runtime, ScriptedDirector, ScriptedTalker
from superdialog_core import events as ev

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=ZoneInfo("UTC"))


def build(yaml: str, **kw: object) -> Runtime:
    return Runtime(Playbook.from_yaml(yaml), ScriptedDirector(kw.pop("verdicts", [])),  # type: ignore[arg-type]
                   ScriptedTalker(["Hello.", "Okay."]), now=NOW, **kw)  # type: ignore[arg-type]


async def test_a_loop_of_expr_rules_stops_after_eight_hops_with_a_degraded_event() -> None:
    rt = build("""
journeys:
  l:
    checkpoints:
      - id: a
        advance_when: [{id: ab, when: "True", judge: expr, to: l.b}]
      - id: b
        advance_when: [{id: ba, when: "True", judge: expr, to: l.a}]
""")
    await rt.start()
    moves = [e for e in rt.log if isinstance(e, ev.Advance) and e.by == "expr"]
    assert len(moves) == 8
    (stop,) = [e for e in rt.log if isinstance(e, ev.Degraded) and e.component == "quiescence"]
    assert "8 hops" in stop.detail


async def test_auto_checkpoints_speak_then_advance_to_their_first_rule() -> None:
    rt = build("""
journeys:
  m:
    checkpoints:
      - id: hello
        auto: true
        say_verbatim: Hi, this is the clinic.
        advance_when: [{when: always, to: m.notice}]
      - id: notice
        auto: true
        say_verbatim: Calls are recorded.
        exit_say: never spoken for an auto move
        advance_when: [{when: always, to: m.ask}]
      - id: ask
        goal: Ask how to help
""")
    opening = await rt.start()
    assert opening.text == "Hi, this is the clinic. Calls are recorded."
    autos = [(e.from_, e.to, e.rule_id) for e in rt.log if isinstance(e, ev.Advance) and e.rule_id == "auto"]
    assert autos == [("m.hello", "m.notice", "auto"), ("m.notice", "m.ask", "auto")]
    assert rt.state.checkpoint == "m.ask"


async def test_a_pipeline_runs_once_per_entry_and_a_failure_without_route_goes_to_on_failure() -> None:
    calls: list[int] = []

    def lookup(args: dict) -> dict:
        calls.append(1)
        raise RuntimeError("backend down")

    yaml = """
journeys:
  p:
    checkpoints:
      - id: check
        pipeline: look
        goal: Tell the caller what was found
      - id: stay
        pipeline: look
        on_failure: p.sorry
      - id: sorry
        terminal: true
        outcome: failed
        say_verbatim: Sorry, that did not work.
tools:
  - {id: lookup, type: python}
pipelines:
  - id: look
    steps: [{tool: lookup}]
"""
    rt = build(yaml, python_tools={"lookup": lookup})
    await rt.start()
    assert calls == [1] and rt.state.checkpoint == "p.check"  # failed, no route: stays
    assert rt.state.slots["error_context"].value == "look:lookup"
    await rt.user_turn("so?")
    await rt.user_turn("anything?")
    assert calls == [1]  # not re-run on later turns at the same entry

    routed = build(yaml.replace("journeys:", "initial: p.stay\njourneys:"),
                   python_tools={"lookup": lookup})
    opening = await routed.start()
    move = [e for e in routed.log if isinstance(e, ev.Advance)][-1]
    assert (move.to, move.rule_id, move.by) == ("p.sorry", "on_failure", "pipeline")
    assert opening.text == "Sorry, that did not work." and opening.outcome == "failed"
