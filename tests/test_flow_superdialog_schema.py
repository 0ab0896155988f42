"""superdialog's whole flow schema loads: every key, alias and list form (issue 10).

The fixture is ours, written in the schema of superdialog's flow models (never a copy of its
files): env as ``env_vars: [{key, value}]``, actions as ``global_actions`` with list headers,
list ``env_updates``, ``body`` next to ``body_template``, a text body with bare ``{{ x|tojson }}``,
triggers spelled ``trigger`` with an ``id``, and every node, edge and action key of the models.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from superdialog_core import Playbook, PlaybookError
from superdialog_core.format.flow_names import rewrite
from superdialog_core.format.flow_text import json_body

FIXTURE = Path(__file__).parent / "fixtures" / "superdialog_schema_flow.json"


def doc() -> dict[str, Any]:
    return copy.deepcopy(json.loads(FIXTURE.read_text()))


@pytest.fixture(scope="module")
def playbook() -> Playbook:
    return Playbook.load(FIXTURE)


def test_aliases_and_list_forms_load(playbook: Playbook) -> None:
    # env_vars as [{key, value}] → env; the env key only speech reads became a call-start value.
    assert playbook.env == {"CLINIC_API": "http://127.0.0.1:9/api", "CLINIC_KEY": "test-key",
                            "caller_first_name": "there"}
    assert playbook.call_start["clinic_name"].default == "Lakeside Physio"
    # global_actions → tools; list headers → a dict; list env_updates → {env_key: result_path}.
    assert [t.id for t in playbook.tools] == ["find_slots", "hold_slot", "confirm_hold"]
    find = playbook.tool("find_slots")
    assert find.headers == {"X-Api-Key": "{{env.CLINIC_KEY}}", "Accept": "application/json"}
    hold = playbook.tool("hold_slot")
    assert hold.env_updates == {"HOLD_ID": "data.hold_id"}
    # body wins over body_template, as in superdialog.
    assert hold.body == {"day": "{{slots.visit_day}}", "kind": "{{slots.visit_kind}}",
                         "phone": "{{slots.caller_phone}}", "ref": "00{{slots.visit_day}}"}
    # A text body with bare {{ x|tojson }} values becomes JSON with typed leaves.
    assert playbook.tool("confirm_hold").body == {"hold": "{{ env.HOLD_ID }}",
                                                  "note": "booked by {{ env.caller_first_name }}"}
    # trigger (alias of trigger_type) with an id → on_enter.
    assert playbook.checkpoint("main.welcome").on_enter == ["find_slots"]
    # agent_language / agent_tone / agent_gender → guidelines.
    assert (playbook.guidelines.language, playbook.guidelines.tone, playbook.guidelines.gender) == (
        "en-GB", "casual", "female")
    # is_final: null is false; a router with actions became a pipeline step.
    assert not playbook.checkpoint("main.done").terminal
    assert [s.tool for s in playbook.pipeline("hold").steps] == ["hold_slot"]


def test_keys_not_acted_on_yet_are_named_in_one_warning(playbook: Playbook) -> None:
    [warning] = [w for w in playbook.warnings if w.message.startswith("flow keys")]
    for key in ("tools", "objective", "nodes[].node_type (6)", "nodes[].interruptible", "nodes[].flow_stage",
                "nodes[].response_mode", "nodes[].edges[].is_fallback", "nodes[].edges[].guard",
                "nodes[].completion_criteria", "nodes[].allow_skip", "nodes[].langGraph",
                "nodes[].edges[].criteria", "nodes[].auto_proceed", "nodes[].type", "nodes[].on_enter_actions",
                "nodes[].on_exit_actions", "nodes[].tools", "actions[].run_once", "actions[].identifier",
                "actions[].condition", "actions[].string_fields"):
        assert key in warning.message, key
    assert warning.severity == "warning" and not warning.strict


def test_both_alias_and_key_given_the_key_wins_with_a_warning() -> None:
    d = doc()
    d["actions"] = d["global_actions"]
    d["global_actions"] = [{"id": "other", "name": "Other", "method": "GET", "url": "http://127.0.0.1:9/x"}]
    playbook = Playbook.from_dict(d)
    assert [t.id for t in playbook.tools] == ["find_slots", "hold_slot", "confirm_hold"]
    assert any("global_actions (superdialog uses actions when both are given)" in w.message
               for w in playbook.warnings)


def test_a_key_in_no_superdialog_model_is_still_an_error_with_did_you_mean() -> None:
    d = doc()
    d["nodes"][0]["auto_procede"] = True
    d["global_actions"][0]["string_feilds"] = []
    d["nodes"][1]["edges"][0]["target_node_id"] = "hodl"
    with pytest.raises(PlaybookError) as err:
        Playbook.from_dict(d)
    found = {p.path: p for p in err.value.problems if p.severity == "error"}
    assert found["nodes[0].auto_procede"].hint == "did you mean 'auto_proceed'?"
    # The author wrote global_actions: the path says so.
    assert found["global_actions[0].string_feilds"].hint == "did you mean 'string_fields'?"
    assert found["nodes[1].edges[0].target_node_id"].hint == "did you mean 'hold'?"


def test_list_forms_must_be_key_value_pairs() -> None:
    d = doc()
    d["global_actions"][0]["headers"] = [{"name": "X", "value": "y"}]
    with pytest.raises(PlaybookError) as err:
        Playbook.from_dict(d)
    [problem] = [p for p in err.value.problems if p.severity == "error"]
    assert problem.path == "global_actions[0].headers"
    assert "must be {key: ..., value: ...}" in problem.message


def test_names_are_qualified_at_the_identifier_level(playbook: Playbook) -> None:
    find = playbook.tool("find_slots")
    # Inside filter arguments too, and current_date → clock.date.
    assert find.url == ("{{env.CLINIC_API}}/slots?day={{ slots.visit_day|default(clock.date) }}"
                        "&kind={{ slots.visit_kind }}")
    guidance = playbook.checkpoint("main.ask_day").guidance
    # {% %} blocks are rewritten; {% set %} / {% for %} locals are not; .success → .ok.
    assert "{% set first = results.slots_result.data.slots|first %}" in guidance
    assert "{{ first.label|default('a slot') }}" in guidance
    assert "{% for s in results.slots_result.data.slots %}, {{ s.label }}{% endfor %}" in guidance
    assert "{% if results.slots_result.ok %}" in guidance
    welcome = playbook.checkpoint("main.welcome").guidance
    assert "{{ slots.clinic_name }}" in welcome and "{{ clock.time }}" in welcome
    # An unknown bare name is a call-start value (superdialog's dispatch-time variables).
    assert "caller_phone" in playbook.call_start and playbook.call_start["caller_phone"].default is None


@pytest.mark.parametrize(("text", "expected"), [
    ("{{ a|default(b) }}", "{{ slots.a|default(slots.b) }}"),
    ("{{ a is not defined }}", "{{ slots.a is not defined }}"),
    ("{{ a|join(attribute='b') == c }}", "{{ slots.a|join(attribute='b') == slots.c }}"),
    ("{{ 'a' ~ \"{{ b }}\" }}", "{{ 'a' ~ \"{{ b }}\" }}"),
    ("{% for x in xs %}{{ x.a }} {{ loop.index }}{% endfor %}", "{% for x in slots.xs %}{{ x.a }} {{ loop.index }}{% endfor %}"),
    ("{% set n = m %}{{ n }}", "{% set n = slots.m %}{{ n }}"),
    ("{{ slots.a }} {{ range(3)|list }}", "{{ slots.a }} {{ range(3)|list }}"),
    ("text {a} only", "text {a} only"),
])
def test_rewrite_qualifies_only_head_names(text: str, expected: str) -> None:
    assert rewrite(text, lambda name: f"slots.{name}") == expected


def test_a_text_body_with_bare_values_parses() -> None:
    assert json_body('{"a": {{ x|tojson }}, "b": "in {{ y }} text", "c": [1, {{z}}]}') == {
        "a": "{{ x }}", "b": "in {{ y }} text", "c": [1, "{{z}}"]}
    assert json_body("a=1&b={{ x }}") is None


def test_env_read_in_speech_and_tools_stays_env_and_the_coverage_says_so(playbook: Playbook) -> None:
    assert "{{env.caller_first_name}}" in playbook.checkpoint("main.welcome").guidance
    gaps = {e.source: e for e in playbook.coverage_gaps}
    assert set(gaps) == {"nodes.welcome", "nodes.confirm"}
    assert "speech reads env value 'caller_first_name', which tools read too" in gaps["nodes.welcome"].note
    # It renders empty in speech (env never reaches the caller), as in superdialog's engine.
    template = playbook.checkpoint("main.welcome")._guidance
    assert "Greet  on behalf of" in template.render({"slots": {}, "env": {}})[0]


def test_coverage_has_an_entry_per_node_edge_and_action(playbook: Playbook) -> None:
    d = doc()
    sources = {e.source for e in playbook.coverage}
    assert {f"nodes.{n['id']}" for n in d["nodes"]} <= sources
    assert {f"actions.{a['id']}" for a in d["global_actions"]} <= sources
    assert {f"nodes.{n['id']}.edges.{e['id']}" for n in d["nodes"] for e in n.get("edges", [])} <= sources
    assert "global_edges.goodbye" in sources
    entry = next(e for e in playbook.coverage if e.source == "nodes.hold")
    assert entry.as_dict() == {"source": "nodes.hold", "became": "steps of pipeline hold", "mapped": True,
                               "note": None}


def test_the_fixture_is_also_valid_for_yaml_readers() -> None:
    # The same flow as YAML text loads the same (YAML 1.2 scalars: `on`, `no` stay strings).
    text = yaml.safe_dump(doc())
    assert Playbook.from_yaml(text) == Playbook.load(FIXTURE)


def test_the_bench_flow_is_ours_has_50_nodes_and_maps_fully() -> None:
    """bench/flow_50.json (the load benchmark's input) is what bench/make_flow50.py writes."""
    import importlib.util

    root = Path(__file__).resolve().parents[1] / "bench"
    spec = importlib.util.spec_from_file_location("make_flow50", root / "make_flow50.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    built = module.build()
    assert json.loads((root / "flow_50.json").read_text()) == built
    assert len(built["nodes"]) == 50
    playbook = Playbook.load(root / "flow_50.json", strict=True)
    assert playbook.coverage_gaps == []
