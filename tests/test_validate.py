"""Validation: each rule of SPEC §2.3 / superdialog §1.12 has a test naming its path and message."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from superdialog_core import Playbook, PlaybookError
from superdialog_core.errors import Problem


def base() -> dict[str, Any]:
    """A small valid playbook; each test breaks one thing."""
    return copy.deepcopy({
        "journeys": {"visit": {"checkpoints": [
            {"id": "greet", "advance_when": [{"when": "wants a visit", "to": "visit.details"}]},
            {"id": "details", "slots": {"name": {"type": "str"}, "day": {"type": "date"}},
             "guidance": "Ask for {{ slots.name | default('the name') }}.",
             "advance_when": [
                 {"when": "slots.name and slots.day", "judge": "expr", "to": "visit.confirm"},
                 {"when": "given", "to": "visit.confirm", "requires": ["name"]}]},
            {"id": "confirm", "advance_when": [{"when": "yes", "to": "visit.book"}]},
            {"id": "book", "pipeline": "book", "advance_when": [
                {"when": "pipeline.ok", "judge": "expr", "to": "visit.done"}]},
            {"id": "done", "terminal": True, "outcome": "booked", "say_verbatim": "Bye {{ slots.name }}."},
        ]}},
        "tools": [{"id": "create", "method": "POST", "url": "http://127.0.0.1/visits",
                   "body": {"name": "{{ slots.name }}"}, "store_response_as": "visit"}],
        "pipelines": [{"id": "book", "steps": [{"tool": "create", "on": {"failed": "visit.confirm"}}]}],
    })


def problems(doc: dict[str, Any]) -> list[Problem]:
    with pytest.raises(PlaybookError) as err:
        Playbook.from_dict(doc)
    return err.value.problems


def one(doc: dict[str, Any], path: str) -> Problem:
    found = [p for p in problems(doc) if p.path == path]
    assert found, f"no problem at {path}: {problems(doc)}"
    return found[0]


def cps(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return doc["journeys"]["visit"]["checkpoints"]


def test_base_is_valid_without_warnings() -> None:
    playbook = Playbook.from_dict(base())
    assert playbook.warnings == []


def test_unknown_key_has_dotted_path_and_did_you_mean() -> None:
    doc = base()
    cps(doc)[1]["guidence"] = "x"
    problem = one(doc, "journeys.visit.checkpoints[1].guidence")
    assert problem.message == "unknown key 'guidence'"
    assert problem.hint == "did you mean 'guidance'?"
    assert str(problem) == ("journeys.visit.checkpoints[1].guidence: unknown key 'guidence' "
                            "(did you mean 'guidance'?)")


def test_unknown_key_without_close_match_lists_allowed_keys() -> None:
    doc = base()
    doc["zzzz"] = 1
    assert "allowed keys: name, persona, journeys" in (one(doc, "zzzz").hint or "")


def test_bad_literal_suggests_the_closest_value() -> None:
    doc = base()
    cps(doc)[2]["gate"] = "hrad"
    problem = one(doc, "journeys.visit.checkpoints[2].gate")
    assert "'hrad'" in problem.message and problem.hint == "did you mean 'hard'?"


def test_union_member_noise_is_dropped() -> None:
    doc = base()
    doc["pipelines"][0]["steps"][0]["on"]["failed"] = {"retry": 11}
    found = problems(doc)
    assert [p.path for p in found] == ["pipelines[0].steps[0].on.failed.retry"]


def test_unknown_checkpoint_ref_with_did_you_mean() -> None:
    doc = base()
    cps(doc)[2]["advance_when"][0]["to"] = "visit.bok"
    problem = one(doc, "journeys.visit.checkpoints[2].advance_when[0].to")
    assert problem.message == "unknown checkpoint 'visit.bok'"
    assert problem.hint == "did you mean 'visit.book'?"


def test_bare_checkpoint_id_suggests_the_qualified_ref() -> None:
    doc = base()
    cps(doc)[2]["advance_when"][0]["to"] = "book"
    assert one(doc, "journeys.visit.checkpoints[2].advance_when[0].to").hint == (
        "refs are journey.id: did you mean 'visit.book'?")


@pytest.mark.parametrize(("where", "path"), [
    (lambda d: d.__setitem__("initial", "visit.nope"), "initial"),
    (lambda d: cps(d)[1].__setitem__("on_failure", "visit.nope"), "journeys.visit.checkpoints[1].on_failure"),
    (lambda d: d.__setitem__("interrupts", [{"id": "bye", "when": "bye", "to": "visit.nope"}]), "interrupts[0].to"),
    (lambda d: d["pipelines"][0]["steps"][0]["on"].__setitem__("failed", "visit.nope"),
     "pipelines[0].steps[0].on.failed"),
    (lambda d: d["pipelines"][0]["steps"][0]["on"].__setitem__("failed", {"retry": 1, "on_exhaust": "visit.nope"}),
     "pipelines[0].steps[0].on.failed.on_exhaust"),
    (lambda d: d.__setitem__("policies", {"silence": {"then": "visit.nope"}}), "policies.silence.then"),
    (lambda d: d.__setitem__("dispatch", [{"intent": "x", "to": "visit.nope"}]), "dispatch[0].to"),
])
def test_every_ref_is_checked(where: Any, path: str) -> None:
    doc = base()
    where(doc)
    assert one(doc, path).message == "unknown checkpoint 'visit.nope'"


def test_journey_name_with_a_dot() -> None:
    doc = base()
    doc["journeys"]["a.b"] = {"checkpoints": [{"id": "x", "terminal": True}]}
    assert one(doc, "journeys['a.b']").message == "journey name must not contain '.': 'a.b'"


def test_duplicate_ids() -> None:
    doc = base()
    cps(doc).append({"id": "done", "terminal": True})
    doc["tools"].append(dict(doc["tools"][0]))
    doc["pipelines"].append(dict(doc["pipelines"][0]))
    found = {p.path: p.message for p in problems(doc)}
    assert found["journeys.visit.checkpoints[5].id"] == "journey 'visit': duplicate id 'done'"
    assert found["tools[1].id"] == "tools: duplicate id 'create'"
    assert found["pipelines[1].id"] == "pipelines: duplicate id 'book'"


def test_store_response_as_pipeline_is_reserved() -> None:
    doc = base()
    doc["tools"][0]["store_response_as"] = "pipeline"
    assert one(doc, "tools[0].store_response_as").message == (
        "tool 'create': store_response_as 'pipeline' is reserved")


def test_compensate_rules() -> None:
    doc = base()
    doc["tools"].append({"id": "undo", "url": "http://127.0.0.1/u", "compensate": "undo"})
    doc["tools"].append({"id": "undo2", "url": "http://127.0.0.1/u", "tier": "compensable", "compensate": "nope"})
    found = [p.message for p in problems(doc) if p.path.endswith("compensate")]
    assert "tool 'undo': compensate needs tier: compensable" in found
    assert "tool 'undo' cannot compensate itself" in found
    assert "unknown tool 'nope'" in found


def test_middleware_refresh_with_must_be_a_tool() -> None:
    doc = base()
    doc["middleware"] = {"refresh_with": "creat"}
    problem = one(doc, "middleware.refresh_with")
    assert problem.message == "middleware.refresh_with: unknown tool 'creat'"
    assert problem.hint == "did you mean 'create'?"


def test_unknown_pipeline_tool_and_handler_refs() -> None:
    doc = base()
    cps(doc)[3]["pipeline"] = "bok"
    cps(doc)[2]["on_enter"] = ["creat"]
    doc["pipelines"][0]["steps"][0]["tool"] = "nope"
    doc["handlers"] = [{"id": "h", "on": "webhook.paid", "pipeline": "nope"}]
    found = {p.path: p.message for p in problems(doc)}
    assert found["journeys.visit.checkpoints[3].pipeline"] == "unknown pipeline 'bok'"
    assert found["journeys.visit.checkpoints[2].on_enter[0]"] == "unknown tool 'creat'"
    assert found["pipelines[0].steps[0].tool"] == "unknown tool 'nope'"
    assert found["handlers[0].pipeline"] == "unknown pipeline 'nope'"


def test_requires_must_be_declared() -> None:
    doc = base()
    cps(doc)[1]["advance_when"][1]["requires"] = ["nmae"]
    problem = one(doc, "journeys.visit.checkpoints[1].advance_when[1].requires[0]")
    assert "requires key 'nmae' is not declared" in problem.message
    assert problem.hint == "did you mean 'name'?"


def test_requires_may_name_a_key_the_rule_sets() -> None:
    doc = base()
    cps(doc)[2]["advance_when"][0].update(requires=["held"], set={"held": "yes"})
    Playbook.from_dict(doc)


def test_auto_without_rule_is_an_error() -> None:
    doc = base()
    cps(doc).insert(4, {"id": "intro", "auto": True, "say_verbatim": "Hi"})
    assert "auto checkpoint needs an advance_when rule" in one(doc, "journeys.visit.checkpoints[4].auto").message


def test_terminal_with_rules_is_an_error() -> None:
    doc = base()
    cps(doc)[4]["advance_when"] = [{"when": "x", "to": "visit.greet"}]
    assert "never run" in one(doc, "journeys.visit.checkpoints[4].advance_when").message


def test_call_start_key_clashing_with_a_slot() -> None:
    doc = base()
    doc["call_start"] = {"name": {"type": "str"}}
    assert one(doc, "call_start.name").message == "call_start value 'name' is also a slot of checkpoint 'visit.details'"


def test_step_outcome_keys_and_retry_under_ok() -> None:
    doc = base()
    doc["pipelines"][0]["steps"][0]["on"] = {"fialed": "visit.confirm", "ok": {"retry": 1}}
    found = {p.path: p for p in problems(doc)}
    assert found["pipelines[0].steps[0].on.fialed"].hint == "did you mean 'failed'?"
    assert "would repeat a call that worked" in found["pipelines[0].steps[0].on.ok"].message


def test_enum_without_values() -> None:
    doc = base()
    cps(doc)[1]["slots"]["kind"] = {"type": "enum"}
    assert "enum slot needs" in one(doc, "journeys.visit.checkpoints[1].slots.kind.values").message


def test_expression_syntax_error_has_its_path() -> None:
    doc = base()
    cps(doc)[1]["advance_when"][0]["when"] = "slots.name and ("
    assert one(doc, "journeys.visit.checkpoints[1].advance_when[0].when").message.startswith("invalid expression")


def test_expression_reading_an_undeclared_slot() -> None:
    doc = base()
    cps(doc)[1]["advance_when"][0]["when"] = "slots.nmae is not None"
    problem = one(doc, "journeys.visit.checkpoints[1].advance_when[0].when")
    assert "undeclared slot 'nmae'" in problem.message
    assert "name" in str(problem)


def test_pipeline_namespace_only_in_a_pipeline_checkpoint() -> None:
    doc = base()
    cps(doc)[2]["advance_when"][0].update(judge="expr", when="pipeline.ok")
    assert "pipeline" in one(doc, "journeys.visit.checkpoints[2].advance_when[0].when").message


def test_env_is_refused_in_views_but_allowed_in_rules_and_tool_when() -> None:
    doc = base()
    doc["env"] = {"MODE": "live"}
    cps(doc)[2]["advance_when"][0].update(judge="expr", when="env.MODE == 'live'")
    doc["tools"][0]["when"] = "env.MODE == 'live'"
    Playbook.from_dict(doc)
    doc["views"] = {"mode": "env.MODE"}
    assert one(doc, "views.mode").message.startswith("invalid expression")


@pytest.mark.parametrize("text", [
    "slots.name.__class__",
    "slots.name == '" + "x" * 5000 + "'",
    "slots.name in " + "[" * 100 + "1" + "]" * 100,
    "not " * 100 + "slots.name",
])
def test_expression_abuse_is_rejected_at_load(text: str) -> None:
    doc = base()
    cps(doc)[1]["advance_when"][0]["when"] = text
    assert one(doc, "journeys.visit.checkpoints[1].advance_when[0].when").message.startswith("invalid expression")


def test_tool_when_is_compiled() -> None:
    doc = base()
    doc["tools"][0]["when"] = "results.visit.ok ==="
    assert one(doc, "tools[0].when").message.startswith("invalid expression")


def test_template_syntax_error_has_its_path() -> None:
    doc = base()
    cps(doc)[1]["guidance"] = "Ask for {{ slots.name "
    assert one(doc, "journeys.visit.checkpoints[1].guidance").message.startswith("invalid template")


def strict_problem(doc: dict[str, Any], path: str) -> Problem:
    """The warning at ``path`` on load, which ``strict`` turns into an error."""
    [warning] = [w for w in Playbook.from_dict(doc).warnings if w.path == path]
    assert (warning.severity, warning.strict) == ("warning", True)
    from superdialog_core.format.loader import load_document

    with pytest.raises(PlaybookError) as err:
        load_document(Playbook, doc, strict=True)
    [error] = [p for p in err.value.problems if p.path == path]
    assert error.severity == "error" and error.message == warning.message
    return warning


def test_template_reading_an_undeclared_slot_is_a_warning_and_strict_error() -> None:
    doc = base()
    cps(doc)[4]["say_verbatim"] = "Bye {{ slots.nam }}."
    problem = strict_problem(doc, "journeys.visit.checkpoints[4].say_verbatim")
    assert problem.message == "template reads undeclared slot 'nam', which renders empty"
    assert problem.hint == "did you mean 'name'?"
    # The runtime renders it empty, as superdialog does.
    assert Playbook.from_dict(doc).checkpoint("visit.done")._say_verbatim.render({"slots": {}})[0] == "Bye ."


def test_an_expression_reading_an_undeclared_slot_stays_an_error() -> None:
    doc = base()
    cps(doc)[1]["advance_when"][0]["when"] = "slots.nam and slots.day"
    problem = one(doc, "journeys.visit.checkpoints[1].advance_when[0].when")
    assert problem.severity == "error"


def test_a_template_local_read_as_a_slot_says_it_is_one() -> None:
    doc = base()
    cps(doc)[2]["guidance"] = "{% set _price = 12 %}{% if slots._price %}It costs {{ _price }}.{% endif %}"
    problem = strict_problem(doc, "journeys.visit.checkpoints[2].guidance")
    assert "'_price' is a template-local variable" in problem.message
    assert problem.hint == "write _price without slots."


def test_a_bare_name_in_a_template_is_a_warning_and_strict_error() -> None:
    doc = base()
    cps(doc)[2]["guidance"] = "Confirm the visit for {{ name }}."
    problem = strict_problem(doc, "journeys.visit.checkpoints[2].guidance")
    assert problem.message == "template reads bare name 'name', which renders empty"
    assert problem.hint == "write slots.name"
    cps(doc)[2]["guidance"] = "{% for n in [1, 2] %}{{ n }}{% endfor %} {{ clock.date }} {{ call.channel }}"
    assert Playbook.from_dict(doc).warnings == []  # locals and namespaces are not bare names


def test_tool_templates_are_compiled_and_checked() -> None:
    doc = base()
    doc["tools"][0]["url"] = "http://127.0.0.1/{{ slots.dya }}"
    doc["tools"][0]["headers"] = {"X": "{% if %}"}
    doc["tools"][0]["body"] = {"day": "{{ slots.nope }}"}
    found = {p.path: p for p in problems(doc)}
    assert found["tools[0].url"].message == "template reads undeclared slot 'dya', which renders empty"
    assert found["tools[0].url"].severity == "warning"
    assert found["tools[0].headers.X"].message.startswith("invalid template")
    assert found["tools[0].body"].message == "template reads undeclared slot 'nope', which renders empty"
    doc["tools"][0]["headers"] = {}
    strict_problem(doc, "tools[0].url")
    strict_problem(doc, "tools[0].body")


def test_speech_templates_cannot_read_env() -> None:
    doc = base()
    doc["env"] = {"TOKEN": "x"}
    cps(doc)[2]["guidance"] = "The token is {{ env.TOKEN }}"
    problem = strict_problem(doc, "journeys.visit.checkpoints[2].guidance")
    assert problem.message == "speech template reads env, which renders empty (env values never reach the caller)"


def test_unreachable_checkpoint_is_a_warning() -> None:
    doc = base()
    cps(doc).append({"id": "lost", "terminal": True})
    playbook = Playbook.from_dict(doc)
    [warning] = playbook.warnings
    assert warning.path == "journeys.visit.checkpoints[5]"
    assert warning.message == "checkpoint 'visit.lost' cannot be reached from 'visit.greet'"
    assert warning.severity == "warning"


def test_reachable_through_interrupts_silence_pipelines_and_handlers() -> None:
    doc = base()
    cps(doc).extend([
        {"id": "bye", "terminal": True}, {"id": "quiet", "terminal": True},
        {"id": "taken", "terminal": True}, {"id": "paid", "terminal": True},
    ])
    doc["interrupts"] = [{"id": "goodbye", "when": "bye", "to": "visit.bye"}]
    doc["policies"] = {"silence": {"then": "visit.quiet"}}
    doc["pipelines"][0]["steps"][0]["on"]["http_409"] = "visit.taken"
    doc["pipelines"].append({"id": "pay", "steps": [{"tool": "create", "on": {"ok": "visit.paid"}}]})
    doc["handlers"] = [{"id": "h", "on": "webhook.paid", "pipeline": "pay"}]
    assert Playbook.from_dict(doc).warnings == []


def test_non_terminal_checkpoint_without_a_way_out_is_a_warning() -> None:
    doc = base()
    cps(doc)[2]["advance_when"].append({"when": "stuck", "to": "visit.stuck"})
    cps(doc).append({"id": "stuck", "goal": "nothing"})
    [warning] = Playbook.from_dict(doc).warnings
    assert warning.path == "journeys.visit.checkpoints[5]"
    assert "has no way out" in warning.message


def test_unsupported_keys_give_one_warning_listing_each_path() -> None:
    doc = base()
    doc.update(pronunciations=[{"word": "x"}], multi_entity=True, knowledge_base="kb")
    cps(doc)[1]["slots"]["name"]["resolve_from"] = {"result": "visit"}
    cps(doc)[2]["context"] = "reset"
    doc["interrupts"] = [{"id": "paid", "when": "paid", "judge": "event", "to": "visit.done"}]
    doc["tools"][0].update(ttl_seconds=5, on_expire="create")
    doc["llm"] = {"provider": "openai", "model": "gpt-4o"}
    doc["guidelines"] = {"call_type": "booking", "gender": "female"}
    cps(doc)[2].update(strict=True, handover=True, uses_kb=True)
    doc["interrupts"][0]["resume"] = True
    warnings = [w for w in Playbook.from_dict(doc).warnings if "does not act on" in w.message]
    assert len(warnings) == 1
    for path in ["pronunciations", "multi_entity", "knowledge_base",
                 "journeys.visit.checkpoints[1].slots.name.resolve_from",
                 "journeys.visit.checkpoints[2].context", "interrupts[0].judge",
                 "tools[0].ttl_seconds", "tools[0].on_expire", "llm", "guidelines.call_type",
                 "guidelines.gender", "journeys.visit.checkpoints[2].strict",
                 "journeys.visit.checkpoints[2].handover", "journeys.visit.checkpoints[2].uses_kb",
                 "interrupts[0].resume"]:
        assert path in warnings[0].message


def test_keys_the_runtime_acts_on_give_no_ignored_warning() -> None:
    """extended_timeout is the hard-gate ladder's wait after the hold line: not ignored."""
    doc = base()
    doc["policies"] = {"extended_timeout": 6, "hold_timeout": 3, "start_failure_line": "Sorry."}
    doc["guidelines"] = {"tone": "casual", "channel": "text", "gender": "neutral"}
    assert Playbook.from_dict(doc).warnings == []


def test_all_problems_come_out_of_one_error_errors_first() -> None:
    doc = base()
    cps(doc)[1]["guidence"] = "x"
    doc["zzzz"] = 1
    with pytest.raises(PlaybookError) as err:
        Playbook.from_dict(doc)
    assert {p.path for p in err.value.problems} >= {"journeys.visit.checkpoints[1].guidence", "zzzz"}
    doc = base()
    doc["middleware"] = {"refresh_with": "nope"}
    doc["tools"][0]["store_response_as"] = "pipeline"
    cps(doc)[1]["advance_when"][0]["when"] = "slots.nope"
    cps(doc).append({"id": "lost", "terminal": True})
    with pytest.raises(PlaybookError) as err:
        Playbook.from_dict(doc)
    severities = [p.severity for p in err.value.problems]
    assert severities.count("error") == 3
    assert severities == sorted(severities)  # "error" sorts before "warning"
    assert "warning" in severities
    assert "3 problems" in str(err.value)


def test_timezone_and_phone_region_are_checked() -> None:
    doc = base()
    doc["guidelines"] = {"timezone": "Europe/Berln"}
    doc["policies"] = {"phone_region": "XX"}
    found = {p.path: p for p in problems(doc)}
    assert found["guidelines.timezone"].message == "unknown timezone 'Europe/Berln'"
    assert found["guidelines.timezone"].hint == "did you mean 'Europe/Berlin'?"
    assert found["policies.phone_region"].message == "unknown phone region 'XX'"


def test_a_problem_does_not_hide_the_others_of_other_kinds() -> None:
    """Structure, compile and graph checks all run on one load."""
    doc = base()
    doc["middleware"] = {"refresh_with": "nope"}
    cps(doc)[1]["advance_when"][0]["when"] = "slots.name and ("
    cps(doc)[4]["say_verbatim"] = "{{ slots.nope }}"
    doc["guidelines"] = {"timezone": "Mars/Base"}
    paths = {p.path for p in problems(doc)}
    assert paths == {"middleware.refresh_with", "journeys.visit.checkpoints[1].advance_when[0].when",
                     "journeys.visit.checkpoints[4].say_verbatim", "guidelines.timezone"}


def test_reading_a_result_or_call_count_no_tool_provides_is_a_warning() -> None:
    doc = base()
    cps(doc)[2]["advance_when"][0].update(judge="expr", when="results.vist.ok or calls['craete'] > 0")
    cps(doc)[2]["guidance"] = "{{ results.visit.data.ref }} {{ results.pipeline.ok }}"
    warnings = Playbook.from_dict(doc).warnings
    assert [(w.path, w.message, w.hint) for w in warnings] == [
        ("journeys.visit.checkpoints[2].advance_when[0].when", "reads results.vist, but no tool stores",
         "did you mean 'visit'?"),
        ("journeys.visit.checkpoints[2].advance_when[0].when", "reads calls.craete, but no tool has that id",
         "did you mean 'create'?"),
    ]


def test_unknown_initial_does_not_also_report_every_checkpoint_unreachable() -> None:
    doc = base()
    doc["initial"] = "visit.gret"
    found = problems(doc)
    assert [(p.path, p.hint) for p in found] == [("initial", "did you mean 'visit.greet'?")]


def test_a_slot_declared_twice_differently_is_a_warning() -> None:
    doc = base()
    cps(doc)[2]["slots"] = {"name": {"type": "str", "confirm": True}}
    [warning] = Playbook.from_dict(doc).warnings
    assert warning.path == "journeys.visit.checkpoints[2].slots.name"
    assert ("at 'visit.confirm' this declaration governs what the Director extracts and how the value "
            "is coerced; the first declaration (in 'visit.details') governs its gate and confirmation, "
            "authoritative and invalidates everywhere") in warning.message
    cps(doc)[2]["slots"] = {"name": {"type": "str"}}
    assert Playbook.from_dict(doc).warnings == []
    # Only the description differs: normal compile_flow output, nothing to warn about.
    cps(doc)[2]["slots"] = {"name": {"type": "str", "description": "the visitor's full name"}}
    assert Playbook.from_dict(doc).warnings == []


def test_unknown_keys_do_not_hide_the_other_checks() -> None:
    doc = base()
    cps(doc)[1]["guidence"] = "x"
    cps(doc)[2]["advance_when"][0]["to"] = "visit.bok"
    cps(doc)[4]["say_verbatim"] = "{{ slots.nope }}"
    paths = [p.path for p in problems(doc)]
    assert paths == ["journeys.visit.checkpoints[1].guidence", "journeys.visit.checkpoints[2].advance_when[0].to",
                     "journeys.visit.checkpoints[4].say_verbatim"]


def test_a_broken_ref_does_not_also_warn_about_the_graph() -> None:
    doc = base()
    cps(doc)[0]["advance_when"][0]["to"] = "visit.detials"
    assert [p.severity for p in problems(doc)] == ["error"]


def test_every_kind_of_problem_comes_out_of_one_load() -> None:
    """An unknown key, a bad literal, a bad reference and an expression error: all four at once."""
    doc = base()
    cps(doc)[1]["guidence"] = "x"
    cps(doc)[2]["gate"] = "medium"
    cps(doc)[0]["advance_when"][0]["to"] = "visit.detials"
    cps(doc)[1]["advance_when"][0]["when"] = "slots.name and ("
    found = {p.path: p for p in problems(doc)}
    assert set(found) == {
        "journeys.visit.checkpoints[1].guidence", "journeys.visit.checkpoints[2].gate",
        "journeys.visit.checkpoints[0].advance_when[0].to", "journeys.visit.checkpoints[1].advance_when[0].when"}
    assert found["journeys.visit.checkpoints[2].gate"].message.startswith("invalid value 'medium'")
    assert found["journeys.visit.checkpoints[0].advance_when[0].to"].hint == "did you mean 'visit.details'?"
    assert found["journeys.visit.checkpoints[1].advance_when[0].when"].message.startswith("invalid expression")
    assert all(p.severity == "error" for p in found.values())


@pytest.mark.parametrize(("change", "path"), [
    (lambda d: cps(d)[1].__setitem__("turn_budget", "x"), "journeys.visit.checkpoints[1].turn_budget"),
    (lambda d: cps(d)[2]["advance_when"][0].__setitem__("judge", "llmm"),
     "journeys.visit.checkpoints[2].advance_when[0].judge"),
    (lambda d: d["pipelines"][0]["steps"][0]["on"].__setitem__("failed", {"retry": 11}),
     "pipelines[0].steps[0].on.failed.retry"),
    (lambda d: cps(d)[2]["advance_when"][0].pop("to"), "journeys.visit.checkpoints[2].advance_when[0].to"),
    (lambda d: d["tools"][0].__setitem__("timeout", "soon"), "tools[0].timeout"),
    (lambda d: d.__setitem__("policies", {"context": "forget"}), "policies.context"),
])
def test_a_bad_value_does_not_hide_the_cross_reference_and_compile_checks(change: Any, path: str) -> None:
    doc = base()
    change(doc)
    cps(doc)[3]["advance_when"][0]["to"] = "visit.dnoe"
    cps(doc)[4]["say_verbatim"] = "Bye {{ slots.nmae }}."
    found = problems(doc)
    assert [p.path for p in found] == [path, "journeys.visit.checkpoints[3].advance_when[0].to",
                                       "journeys.visit.checkpoints[4].say_verbatim"]
    assert found[1].message == "unknown checkpoint 'visit.dnoe'"
    assert found[2].hint == "did you mean 'name'?"


def test_paths_after_a_dropped_item_are_the_authors() -> None:
    """A rule missing `to` is left out to check the rest; later rules keep their own index."""
    doc = base()
    cps(doc)[1]["advance_when"].insert(0, {"when": "x"})
    cps(doc)[1]["advance_when"][2]["requires"] = ["nmae"]
    cps(doc)[1]["advance_when"][1]["when"] = "slots.nmae"
    cps(doc).insert(0, {"goal": "no id"})
    paths = [p.path for p in problems(doc)]
    assert paths == ["journeys.visit.checkpoints[0].id", "journeys.visit.checkpoints[2].advance_when[0].to",
                     "journeys.visit.checkpoints[2].advance_when[2].requires[0]",
                     "journeys.visit.checkpoints[2].advance_when[1].when"]


def test_no_follow_on_problem_from_what_the_repair_left_out() -> None:
    doc = base()
    # The only rule of an auto checkpoint is left out (no `to`): no "auto needs a rule" too.
    cps(doc)[2]["advance_when"] = [{"when": "yes"}]
    cps(doc)[2]["auto"] = True
    # A bad `advance_when` shape: the field is left out, so no "pipeline.ok" rule is compiled.
    cps(doc)[3]["advance_when"] = "pipeline.ok"
    # A pipeline left out whole (no steps): no "unknown pipeline" for the checkpoint that runs it.
    doc["pipelines"][0].pop("steps")
    # A bad value reset to its default: the tool itself is still checked.
    doc["tools"][0]["method"] = 5
    doc["tools"].append({"url": "http://127.0.0.1/{{ slots.nope }}"})
    # Slots whose declaration is malformed: no "undeclared slot" for their reads.
    cps(doc)[1]["slots"] = ["name", "day"]
    found = problems(doc)
    assert sorted(p.path for p in found) == [
        "journeys.visit.checkpoints[1].slots", "journeys.visit.checkpoints[2].advance_when[0].to",
        "journeys.visit.checkpoints[3].advance_when", "pipelines[0].steps", "tools[0].method", "tools[1].id"]
    assert not [p for p in found if p.severity == "warning"]


def test_a_missing_required_top_level_key_still_lists_the_other_field_problems() -> None:
    doc = base()
    del doc["journeys"]
    doc["zzzz"] = 1
    doc["tools"][0]["timeout"] = "soon"
    assert {p.path for p in problems(doc)} == {"journeys", "zzzz", "tools[0].timeout"}


def test_args_are_readable_in_a_tool_when_and_nowhere_else_in_expressions() -> None:
    """A tool's `when` and templates see the arguments it is called with (a handler's payload);
    a rule's expression has no arguments, so reading args there is a clear load error."""
    doc = base()
    doc["tools"][0]["body"] = {"name": "{{ args.name }}"}
    doc["tools"][0]["when"] = "args.name is not None"
    Playbook.from_dict(copy.deepcopy(doc))
    cps(doc)[2]["advance_when"][0].update(judge="expr", when="args.x")
    found = {p.path: p for p in problems(doc)}
    assert "tools[0].when" not in found
    message = found["journeys.visit.checkpoints[2].advance_when[0].when"].message
    assert message.startswith("invalid expression: 'args' is only available in a tool's `when`")


_JUNK = [None, 0, 11, -1, "x", "", "visit.nope", [], ["a"], {}, {"a": 1}, True, 1.5, "{{ x (", [{"id": 1}]]


def _places(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path] if path else []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else []
    for key, value in items:
        found.extend(_places(value, (*path, key)))
    return found


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_broken_document_gives_a_playbook_error_with_at_least_one_error(data: Any) -> None:
    """Whatever is broken, the best-effort repair never crashes and never hides every error."""
    doc = data.draw(st.sampled_from([
        base(),
        {"playbook": [{"id": "ask", "collect": ["name"], "then": "close"}, {"id": "close", "say": "Bye."}]},
    ]))
    for _ in range(data.draw(st.integers(1, 4))):
        places = _places(doc)
        place = data.draw(st.sampled_from(places))
        parent = doc
        for key in place[:-1]:
            parent = parent[key]
        if isinstance(parent, dict) and data.draw(st.booleans()):
            parent[f"zz{place[-1]}"] = parent.pop(place[-1])
        else:
            parent[place[-1]] = copy.deepcopy(data.draw(st.sampled_from(_JUNK)))
    try:
        Playbook.from_dict(doc)
    except PlaybookError as err:
        assert [p for p in err.problems if p.severity == "error"]
        assert all(isinstance(p.path, str) for p in err.problems)


def test_a_path_in_a_hint_is_the_authors_too() -> None:
    doc = base()
    cps(doc).insert(0, {"goal": "no id"})
    cps(doc).append({"id": "done", "terminal": True})
    found = {p.path: p for p in problems(doc)}
    assert found["journeys.visit.checkpoints[6].id"].hint == (
        "the first is at journeys.visit.checkpoints[5]; give each a unique id")
