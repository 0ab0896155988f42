"""Simple-format lowering: superdialog §1.14 with the deliberate differences of SPEC §2.2."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from superdialog_core import Playbook, PlaybookError
from superdialog_core.errors import Problem
from superdialog_core.format.simple import language_name

from tests.paths import EXAMPLES as EXAMPLES_DIR

FIXTURES = Path(__file__).parent / "fixtures"
INSURANCE = EXAMPLES_DIR / "insurance_callback_simple.yaml"


def steps(**first: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"playbook": [
        {"id": "ask", "purpose": "Get a name", "collect": ["name"], "done_when": "name known"},
        {"id": "close", "purpose": "Close", "say": "Say goodbye."},
    ]}
    doc["playbook"][0].update(first)
    return copy.deepcopy(doc)


def problems(doc: dict[str, Any]) -> list[Problem]:
    with pytest.raises(PlaybookError) as err:
        Playbook.from_dict(doc)
    return err.value.problems


def test_reference_example_lowers_as_superdialog_with_our_differences() -> None:
    playbook = Playbook.load(FIXTURES / "simple_booking.yaml")
    assert list(playbook.checkpoints) == [
        "main.greet", "main.collect", "main.name", "main.close_no", "main.close_ok"]
    greet = playbook.checkpoint("main.greet")
    assert greet.gate == "soft" and greet.turn_budget is None
    assert [(r.judge, r.when, r.to) for r in greet.advance_when] == [
        ("llm", "caller is not interested", "main.close_no"),
        ("llm", "the caller asks to book a table", "main.collect"),
    ]
    collect = playbook.checkpoint("main.collect")
    assert collect.gate == "soft"  # superdialog: hard
    assert collect.turn_budget is None  # superdialog: 4
    assert {k: (s.type, s.gate, s.required) for k, s in collect.slots.items()} == {
        "party_size": ("str", "soft", True), "day": ("str", "soft", True)}
    assert [(r.judge, r.when, r.to, r.requires) for r in collect.advance_when] == [
        ("expr", "slots.party_size is not None and slots.day is not None", "main.name", []),
        ("llm", "party size and day are known", "main.name", ["party_size", "day"]),
    ]
    assert collect.exit_say == "Great, let me note that down."
    name = playbook.checkpoint("main.name")
    assert [(r.judge, r.when, r.to) for r in name.advance_when] == [
        ("expr", "slots.guest_name is not None", "main.close_ok"),
        ("llm", "step complete", "main.close_ok"),
    ]
    assert (playbook.checkpoint("main.close_no").terminal, playbook.checkpoint("main.close_no").outcome) == (
        True, "not_interested")
    assert (playbook.checkpoint("main.close_ok").terminal, playbook.checkpoint("main.close_ok").outcome) == (
        True, "booked")
    assert playbook.knowledge_base == "parking: Free parking behind the restaurant"
    assert playbook.guidelines.language == ["en", "it"]
    assert playbook.interrupt("goodbye").to == "main.close_no"
    assert playbook.interrupt("goodbye").kind == "goodbye"


def test_persona_prose_order_and_language_names() -> None:
    persona = Playbook.load(FIXTURES / "simple_booking.yaml").persona
    blocks = persona.split("\n\n")
    assert blocks[0] == "You are Maya, the reservations host at Trattoria Verde."
    assert "Your name is" not in persona  # the identity already names Maya
    assert blocks[1] == "Default conversation language: English. Also speaks: Italian."
    assert blocks[2] == "Voice & manner: warm and brief"
    assert blocks[3].startswith("Overall goal: Book a table")
    assert blocks[4] == "## Reference facts (never invent beyond these)\nopening_hours: Tue-Sun 12:00-23:00"
    assert blocks[5] == "## Objection handling\n- If too expensive -> Mention the lunch menu at 18 euros."
    assert blocks[6] == "## Hard boundaries\n- Never promise a specific table."
    assert blocks[7] == "## Fallback actions\n- no_answer: Offer to call back later."
    assert blocks[8] == "## Closing line\nThank the caller and say goodbye."
    assert language_name("de") == "German"
    assert language_name("xx-nope") == "xx-nope"


def test_steps_with_branches_get_no_companion_expr_rule() -> None:
    playbook = Playbook.load(INSURANCE)
    intro = playbook.checkpoint("main.intro")
    assert [r.judge for r in intro.advance_when] == ["llm", "llm"]
    assert intro.advance_when[0].to == "main.later"
    assert intro.advance_when[1].requires == ["good_time"]
    slot = playbook.checkpoint("main.slot")
    assert slot.advance_when[0].judge == "expr"
    assert slot.advance_when[0].when == "slots.callback_day is not None and slots.callback_time is not None"


def test_bare_interrupt_target_is_qualified() -> None:
    playbook = Playbook.load(INSURANCE)
    assert playbook.interrupt("goodbye").to == "main.decline"
    doc = steps()
    doc["interrupts"] = [{"when": "bye", "to": "main.close"}, {"when": "help", "to": "close", "resume": True}]
    playbook = Playbook.from_dict(doc)
    assert [(i.id, i.to, i.resume) for i in playbook.interrupts] == [
        ("interrupt_0", "main.close", False), ("interrupt_1", "main.close", True)]


def test_unknown_interrupt_target_has_did_you_mean() -> None:
    doc = steps()
    doc["interrupts"] = [{"when": "bye", "to": "clsoe"}]
    [problem] = problems(doc)
    assert (problem.path, problem.message, problem.hint) == (
        "interrupts[0].to", "unknown step 'clsoe'", "did you mean 'close'?")


def test_gate_defaults_to_soft_and_an_explicit_gate_is_kept() -> None:
    assert Playbook.from_dict(steps()).checkpoint("main.ask").gate == "soft"
    assert Playbook.from_dict(steps(gate="hard")).checkpoint("main.ask").gate == "hard"


def test_require_defaults_to_collect_only_up_to_two_keys() -> None:
    three = Playbook.from_dict(steps(collect=["a", "b", "c"])).checkpoint("main.ask")
    assert [r.judge for r in three.advance_when] == ["llm"]
    assert three.advance_when[0].requires == []
    explicit = Playbook.from_dict(steps(collect=["a", "b", "c"], require=["a"])).checkpoint("main.ask")
    assert explicit.advance_when[0].when == "slots.a is not None"
    assert explicit.slots["a"].required and not explicit.slots["b"].required


def test_then_and_then_say_and_turn_budget() -> None:
    doc = steps(then="done", then_say="Noted.", turn_budget=3)
    doc["playbook"].append({"id": "done", "terminal": True, "outcome": "ok"})
    ask = Playbook.from_dict(doc).checkpoint("main.ask")
    assert {r.to for r in ask.advance_when} == {"main.done"}
    assert ask.exit_say == "Noted." and ask.turn_budget == 3


def test_opening_is_the_first_steps_guidance_when_it_has_no_say() -> None:
    doc = steps()
    doc["opening"] = "Hello there."
    assert Playbook.from_dict(doc).checkpoint("main.ask").guidance == "Hello there."


def test_last_step_without_then_is_terminal_closed() -> None:
    close = Playbook.from_dict(steps()).checkpoint("main.close")
    assert (close.terminal, close.outcome, close.advance_when) == (True, "closed", [])


def test_unknown_keys_are_errors_with_did_you_mean_at_every_level() -> None:
    doc = steps(done_wehn="x", branches=[{"when": "no", "to": "close", "requirs": []}])
    doc["playbook"][1]["terminal"] = True
    doc["gaol"] = "x"
    found = {p.path: p for p in problems(doc)}
    assert str(found["playbook[0].done_wehn"]) == (
        "playbook[0].done_wehn: unknown key 'done_wehn' (did you mean 'done_when'?)")
    assert found["playbook[0].branches[0].requirs"].hint == "did you mean 'requires'?"
    assert found["gaol"].hint == "did you mean 'goal'?"


@pytest.mark.parametrize(("change", "path", "message"), [
    ({"then": "ask"}, "playbook[0].then", "step 'ask' cannot lead to itself"),
    ({"then": "clsoe"}, "playbook[0].then", "unknown step 'clsoe'"),
    ({"branches": [{"when": "x", "to": "ask"}]}, "playbook[0].branches[0].to", "step 'ask' cannot branch to itself"),
    ({"branches": [{"when": "x", "to": "close"}]}, "playbook[0].branches[0].to",
     "branch to 'close', where the step goes anyway"),
    ({"branches": [{"when": " ", "to": "other"}]}, "playbook[0].branches[0].when", "a branch needs a non-blank when"),
    ({"outcome": "won"}, "playbook[0].outcome", "outcome 'won' on a step that is not terminal"),
    ({"terminal": True, "branches": [{"when": "x", "to": "other"}]}, "playbook[0].branches",
     "a terminal step cannot branch"),
    ({"terminal": True, "then_say": "bye"}, "playbook[0].then_say",
     "a terminal step is never left, so then_say never plays"),
])
def test_step_errors(change: dict[str, Any], path: str, message: str) -> None:
    doc = steps(**change)
    doc["playbook"].append({"id": "other", "terminal": True})
    found = {p.path: p.message for p in problems(doc)}
    assert found[path] == message


def test_duplicate_branch_target() -> None:
    doc = steps(branches=[{"when": "x", "to": "other"}, {"when": "y", "to": "other"}])
    doc["playbook"].append({"id": "other", "terminal": True})
    found = {p.path: p.message for p in problems(doc)}
    assert found["playbook[0].branches[1].to"] == "duplicate branch target 'other'"


def test_branch_targets_and_requires_lower_to_llm_rules() -> None:
    doc = steps(branches=[{"when": "wants a human", "to": "main.other", "requires": ["name"]}])
    doc["playbook"].append({"id": "other", "terminal": True})
    ask = Playbook.from_dict(doc).checkpoint("main.ask")
    assert [(r.judge, r.to, r.requires) for r in ask.advance_when] == [
        ("llm", "main.other", ["name"]), ("llm", "main.close", ["name"])]


def test_yaml11_lookalikes_stay_strings_in_the_simple_format() -> None:
    playbook = Playbook.from_yaml("playbook:\n  - {id: a, purpose: no, say: 10:30, done_when: off}\n  - {id: b}\n")
    a = playbook.checkpoint("main.a")
    assert (a.goal, a.guidance, a.advance_when[-1].when) == ("no", "10:30", "off")


def test_persona_may_be_plain_text() -> None:
    doc = steps()
    doc.update(persona="You are Sam from Harbor Mutual.", goal="Book a callback.")
    playbook = Playbook.from_dict(doc)
    assert playbook.persona == ("You are Sam from Harbor Mutual.\n\nDefault conversation language: English."
                                "\n\nOverall goal: Book a callback.")
    assert playbook.guidelines.language == "en"


def test_unknown_keys_do_not_hide_step_errors() -> None:
    doc = steps(then="clsoe", done_wehn="x")
    assert [(p.path, p.message) for p in problems(doc)] == [
        ("playbook[0].done_wehn", "unknown key 'done_wehn'"), ("playbook[0].then", "unknown step 'clsoe'")]


def test_every_kind_of_problem_comes_out_of_one_load() -> None:
    """An unknown key, a bad literal, a bad reference and a template error, with the author's paths."""
    doc = steps(done_wehn="x", gate="medium", then="clsoe", say="Hi {{ slots.nmae }}")
    doc["playbook"].append({"id": "other", "terminal": True, "say": "{{ x ("})
    found = {p.path: p for p in problems(doc)}
    assert set(found) == {"playbook[0].done_wehn", "playbook[0].gate", "playbook[0].then",
                          "playbook[0].say", "playbook[2].say"}
    assert found["playbook[0].gate"].message.startswith("invalid value 'medium'")
    assert found["playbook[0].then"].message == "unknown step 'clsoe'"
    assert found["playbook[0].say"].hint == "did you mean 'name'?"
    assert found["playbook[2].say"].message.startswith("invalid template")


def test_a_dropped_step_keeps_the_other_steps_paths_and_adds_no_follow_on() -> None:
    doc = steps(turn_budget="x")
    doc["playbook"].insert(1, {"purpose": "no id", "then": "close"})
    doc["playbook"].append({"id": "gone", "purpose": 5})
    doc["playbook"][2]["say"] = "Bye {{ slots.nope }}"
    doc["interrupts"] = [{"when": "bye", "to": "gone"}]
    doc["timezone"] = "Mars/Base"
    assert [p.path for p in problems(doc)] == [
        "playbook[0].turn_budget", "playbook[1].id", "playbook[3].purpose", "timezone", "playbook[2].say"]


def test_opening_template_error_names_opening() -> None:
    doc = steps()
    doc["opening"] = "{{ slots.nope }}"
    assert [(p.path, p.message) for p in Playbook.from_dict(doc).warnings] == [
        ("opening", "template reads undeclared slot 'nope', which renders empty")]
    doc["opening"] = "{{ slots.nope "
    assert [p.path for p in problems(doc)] == ["opening"]


@pytest.mark.parametrize(("change", "path"), [
    ({"require": ["nope"]}, "playbook[0].require"),
    ({"collect": ["first name"]}, "playbook[0].collect"),
    ({"branches": [{"when": "x"}, {"when": "y", "to": "other", "requires": ["zz"]}]}, "playbook[0].branches[1].requires[0]"),
])
def test_problems_of_lowered_rules_name_the_key_they_came_from(change: dict[str, Any], path: str) -> None:
    doc = steps(**change)
    doc["playbook"].append({"id": "other", "terminal": True})
    found = problems(doc)
    assert path in {p.path for p in found}, found
    assert not [p for p in found if p.path.startswith("journeys")]


def test_an_empty_then_is_a_clear_problem_not_a_crash() -> None:
    with pytest.raises(PlaybookError) as info:
        Playbook.from_dict({"playbook": [{"id": "ask", "collect": ["name"], "then": ""}]})
    assert [(p.path, p.message) for p in info.value.problems if p.severity == "error"] == [
        ("playbook[0].then", "then is empty")
    ]
