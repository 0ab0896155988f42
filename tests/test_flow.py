"""Legacy flow JSON → full format (reference §1.15): mapping details and the coverage report."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from superdialog_core import Playbook, PlaybookError
from superdialog_core.format.flow import compile_flow

FIXTURE = Path(__file__).parent / "fixtures" / "legacy_flow.json"


def flow_doc() -> dict[str, Any]:
    return copy.deepcopy(json.loads(FIXTURE.read_text()))


def node(doc: dict[str, Any], node_id: str) -> dict[str, Any]:
    return next(n for n in doc["nodes"] if n["id"] == node_id)


@pytest.fixture(scope="module")
def playbook() -> Playbook:
    return Playbook.load(FIXTURE)


def test_fixture_compiles_with_an_empty_coverage_report(playbook: Playbook) -> None:
    assert len(flow_doc()["nodes"]) >= 8
    assert playbook.coverage_gaps == []
    sources = {entry.source for entry in playbook.coverage}
    doc = flow_doc()
    assert {f"nodes.{n['id']}" for n in doc["nodes"]} <= sources  # every node says what it became
    assert {f"actions.{a['id']}" for a in doc["actions"]} <= sources
    assert all(entry.became for entry in playbook.coverage)
    assert playbook.warnings == []
    assert playbook.initial_ref == "main.greet"
    assert playbook.persona.startswith("You are Maya")


def test_speaking_nodes_become_soft_checkpoints(playbook: Playbook) -> None:
    collect = playbook.checkpoint("main.collect")
    assert (collect.goal, collect.gate, collect.turn_budget) == ("Have party size, date and time", "soft", 6)
    assert {k: s.type for k, s in collect.slots.items()} == {"party_size": "int", "date": "date", "time": "time"}
    assert not any(s.required for s in collect.slots.values())
    done = playbook.checkpoint("main.done")
    assert (done.terminal, done.outcome) == (True, "done")
    assert done.say_verbatim == "You're all set, {{slots.name}}. See you soon!"  # the author's spacing is kept
    assert "refresh" not in {ref.split(".")[1] for ref in playbook.checkpoints}
    assert "check_availability" not in {ref.split(".")[1] for ref in playbook.checkpoints}


def test_edges_become_rules_with_requires_and_edge_ids(playbook: Playbook) -> None:
    [rule] = playbook.checkpoint("main.collect").advance_when
    assert (rule.id, rule.judge, rule.when) == ("details_given", "llm", "The caller gave party size, date and time")
    assert rule.requires == ["party_size", "date", "time"]
    assert rule.to == "main.collect__details_given"


def test_tool_chain_becomes_a_pipeline_and_a_synthetic_checkpoint(playbook: Playbook) -> None:
    pipeline = playbook.pipeline("check_availability")
    assert [s.tool for s in pipeline.steps] == ["availability", "hold"]
    assert pipeline.steps[0].on == {"http_409": "main.fully_booked", "failed": "main.sorry"}
    assert pipeline.steps[1].on == {"failed": "main.sorry"}
    synthetic = playbook.checkpoint("main.collect__details_given")
    assert synthetic.pipeline == "check_availability" and synthetic.gate == "soft"
    assert [(r.judge, r.when, r.to) for r in synthetic.advance_when] == [
        ("expr", "pipeline.ok", "main.confirm"), ("expr", "pipeline.failed", "main.sorry")]
    assert synthetic.advance_when[0]._expr is not None
    again = playbook.checkpoint("main.fully_booked__new_time")
    assert again.pipeline == "check_availability"


def test_templates_are_qualified(playbook: Playbook) -> None:
    availability = playbook.tool("availability")
    assert availability.url == "{{env.API_BASE}}/availability?date={{slots.date}}&party={{slots.party_size}}"
    assert availability.headers == {"Authorization": "Bearer {{env.API_KEY}}"}
    assert playbook.tool("hold").body == {
        "date": "{{slots.date}}", "time": "{{slots.time}}", "party": "{{slots.party_size}}"}
    assert "{{slots.party_size}} guests" in playbook.checkpoint("main.confirm").guidance


def test_silence_nodes_become_the_silence_policy(playbook: Playbook) -> None:
    silence = playbook.policies.silence
    assert silence is not None
    assert (silence.max_prompts, silence.prompts, silence.then) == (1, ["Are you still there?"], "main.no_answer")
    assert "main.still_there" not in playbook.checkpoints
    assert all("respond" not in r.when.lower() for r in playbook.checkpoint("main.greet").advance_when)


def test_global_edges_become_interrupts_and_middleware(playbook: Playbook) -> None:
    [interrupt] = playbook.interrupts
    assert (interrupt.id, interrupt.to, interrupt.kind, interrupt.judge) == ("goodbye", "main.bye", "goodbye", "llm")
    assert playbook.middleware is not None
    assert (playbook.middleware.on_status, playbook.middleware.refresh_with) == (401, "refresh_token")


def test_webhook_system_node_becomes_a_handler(playbook: Playbook) -> None:
    [handler] = playbook.handlers
    assert (handler.id, handler.on) == ("payment_hook", "webhook.payment_captured")
    assert [s.tool for s in playbook.pipeline(handler.pipeline).steps] == ["notify_kitchen"]


def test_result_conditions_on_a_speaking_node_become_expr_rules() -> None:
    doc = flow_doc()
    node(doc, "confirm")["actions"] = [{"trigger_type": "on_enter", "action_id": "availability"}]
    node(doc, "confirm")["edges"].append(
        {"id": "api_down", "condition": "availability.success == false — the API is down", "target_node_id": "sorry"})
    node(doc, "confirm")["edges"].append(
        {"id": "gone", "condition": "availability.status == 404", "target_node_id": "sorry"})
    confirm = Playbook.from_dict(doc).checkpoint("main.confirm")
    assert confirm.on_enter == ["availability"]
    assert [(r.judge, r.when) for r in confirm.advance_when[1:]] == [
        ("expr", "results.availability.ok == False"), ("expr", "results.availability.status == 404")]


def test_tool_free_routing_nodes_are_folded_into_their_sources() -> None:
    doc = flow_doc()
    node(doc, "greet")["edges"][0]["target_node_id"] = "router"
    doc["nodes"].append({"id": "router", "edges": [
        {"condition": "the caller is a regular", "target_node_id": "collect"},
        {"condition": "the caller is new", "target_node_id": "confirm"}]})
    rules = Playbook.from_dict(doc).checkpoint("main.greet").advance_when
    assert [(r.when, r.to) for r in rules] == [
        ("The caller wants to book a table and the caller is a regular", "main.collect"),
        ("The caller wants to book a table and the caller is new", "main.confirm")]


def test_coverage_entries_say_what_did_not_map() -> None:
    doc = flow_doc()
    doc["actions"].append({"id": "unused", "url": "http://127.0.0.1/x"})
    node(doc, "confirm")["actions"] = [{"trigger_type": "on_exit", "action_id": "availability"}]
    node(doc, "bye")["static_text"] = "Bye {{ nickname }}"
    doc["nodes"].append({"id": "lonely", "instruction": "Nobody comes here.", "is_final": True})
    playbook = Playbook.from_dict(doc)
    entries = {e.source: e for e in playbook.coverage}
    assert entries["nodes.lonely"].as_dict() == {
        "source": "nodes.lonely", "became": "checkpoint main.lonely", "mapped": True,
        "note": "an orphan: no edge leads to it (kept, unreachable)"}
    assert entries["actions.unused"].note == "never used by a node or an edge"
    assert [e.as_dict() for e in playbook.coverage_gaps] == [
        {"source": "nodes.confirm", "became": "checkpoint main.confirm", "mapped": False,
         "note": "on_exit action 'availability' has no equivalent yet"}]
    # An unknown name is a value the call starts with (superdialog's dispatch-time variables).
    assert playbook.checkpoint("main.bye").say_verbatim == "Bye {{ slots.nickname }}"
    assert playbook.call_start["nickname"].type == "str"


def test_unknown_keys_in_a_flow_have_did_you_mean() -> None:
    doc = flow_doc()
    node(doc, "greet")["instrucion"] = "x"
    doc["nodes"][1]["edges"][0]["conditon"] = "x"
    doc["nodes"][1]["edges"][0]["target_node_id"] = "chek_availability"
    with pytest.raises(PlaybookError) as err:
        Playbook.from_dict(doc)
    found = {p.path: p for p in err.value.problems}
    assert found["nodes[1].edges[0].target_node_id"].hint == "did you mean 'check_availability'?"
    assert str(found["nodes[0].instrucion"]) == "nodes[0].instrucion: unknown key 'instrucion' (did you mean 'instruction'?)"
    assert found["nodes[1].edges[0].conditon"].hint == "did you mean 'condition'?"


def test_unknown_targets_and_actions_are_errors() -> None:
    doc = flow_doc()
    node(doc, "greet")["edges"][0]["target_node_id"] = "colect"
    node(doc, "confirm")["actions"] = [{"action_id": "hodl"}]
    doc["initial_node"] = "gret"
    _, problems, _ = compile_flow(doc)
    found = {p.path: str(p) for p in problems}
    assert found["nodes[0].edges[0].target_node_id"] == (
        "nodes[0].edges[0].target_node_id: unknown node 'colect' (did you mean 'collect'?)")
    assert "unknown action 'hodl'" in found["nodes[4].actions[0].action_id"]
    assert "did you mean 'greet'?" in found["initial_node"]


def test_flow_round_trips_through_to_yaml(playbook: Playbook) -> None:
    assert Playbook.from_yaml(playbook.to_yaml()) == playbook


def test_every_kind_of_problem_comes_out_of_one_load() -> None:
    """An unknown key, a bad value, an unknown target and a template error, with the flow's paths."""
    doc = flow_doc()
    node(doc, "greet")["instrucion"] = "x"
    node(doc, "greet")["max_turns"] = 0
    node(doc, "greet")["edges"][0]["target_node_id"] = "colect"
    node(doc, "confirm")["instruction"] = "Confirm {% if %}"
    with pytest.raises(PlaybookError) as err:
        Playbook.from_dict(doc)
    found = {p.path: p for p in err.value.problems}
    confirm = [n["id"] for n in doc["nodes"]].index("confirm")
    assert set(found) == {"nodes[0].instrucion", "nodes[0].max_turns", "nodes[0].edges[0].target_node_id",
                          f"nodes[{confirm}].instruction"}
    assert found["nodes[0].edges[0].target_node_id"].hint == "did you mean 'collect'?"
    assert found[f"nodes[{confirm}].instruction"].message.startswith("invalid template")
    assert all(p.severity == "error" for p in found.values())


def test_an_unusable_initial_node_still_reports_the_field_problems() -> None:
    doc = flow_doc()
    doc["initial_node"] = "gret"
    node(doc, "collect")["is_final"] = "maybe"
    with pytest.raises(PlaybookError) as err:
        Playbook.from_dict(doc)
    assert [p.path for p in err.value.problems] == ["nodes[1].is_final", "initial_node"]
