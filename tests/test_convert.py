"""``convert``: pipecat-flows FlowConfig → full-format playbook (SPEC §12).

Two FlowConfigs of our own (``tests/fixtures/pipecat/``): a linear library line in YAML
(transition_only functions, tts_say, end_conversation, a global function) and a pizza order in
JSON (functions that branch on a result field, a function action, a custom action, a global
function with code). Each converts into YAML that loads and runs a scripted conversation to
the outcome its flow leads to.
"""

from __future__ import annotations

import importlib.util
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from superdialog_core import Playbook, PlaybookError, Runtime, ScriptedDirector, ScriptedTalker
from superdialog_core import events as ev
from superdialog_core.format.pipecat import (
    convert_flow_config,
    handler_info,
    parse_flow_config,
    read_flow_file,
)

PIPECAT = Path(__file__).resolve().parent / "fixtures" / "pipecat"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=ZoneInfo("UTC"))


def handlers() -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location("pizza_handlers", PIPECAT / "pizza_handlers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {name: getattr(module, name) for name in ("check_pizza", "place_order", "open_ticket")}


def convert(name: str, **kwargs: Any) -> tuple[Playbook, list[str]]:
    conversion = convert_flow_config(read_flow_file(PIPECAT / name), name=name, **kwargs)
    playbook = Playbook.from_yaml(conversion.to_yaml())
    return playbook, [str(p) for p in conversion.report]


def advances(rt: Runtime) -> list[str]:
    return [e.to for e in rt.log if isinstance(e, ev.Advance)]


# --- the linear flow ------------------------------------------------------------------------


def test_the_library_flow_converts_rule_by_rule() -> None:
    playbook, report = convert("library_flow.yaml")
    assert playbook.initial_ref == "main.greeting"
    assert playbook.persona.startswith("You are Ada")
    greeting = playbook.checkpoint("main.greeting")
    assert greeting.say_verbatim == "Northside Library, Ada speaking."
    assert [(r.judge, r.when, r.to) for r in greeting.advance_when] == [
        ("llm", "The caller asks for the opening hours.", "main.hours"),
        ("llm", "The caller wants to renew a book.", "main.renewal"),
    ]
    assert greeting.goal.startswith("Ask whether the caller wants")
    assert playbook.checkpoint("main.renewal").context == "reset"
    goodbye = playbook.checkpoint("main.goodbye")
    assert goodbye.terminal and goodbye.outcome == "goodbye"
    assert goodbye.say_verbatim == "Thanks for calling Northside Library. Goodbye!"
    (interrupt,) = playbook.interrupts
    assert (interrupt.id, interrupt.to) == ("talk_to_a_person", "main.goodbye")
    # flow state has no counterpart: said so, and written as the bare name
    assert any("caller_name" in line and "flow state" in line for line in report), report
    assert "{{" not in playbook.checkpoint("main.renewal").goal


async def test_the_library_playbook_runs_to_its_goodbye() -> None:
    playbook, _ = convert("library_flow.yaml")
    director = ScriptedDirector([{"advance": "main.hours"}, {"advance": "main.goodbye"}])
    talker = ScriptedTalker(["Sure.", "We are open nine to six on weekdays. Anything else?"])
    rt = Runtime(playbook, director, talker, now=NOW)
    opening = await rt.start()
    assert opening.text == "Northside Library, Ada speaking."
    await rt.user_turn("when are you open?")
    last = await rt.user_turn("no, that's all, thanks")
    assert last.ended and last.outcome == "goodbye"
    assert last.text.endswith("Thanks for calling Northside Library. Goodbye!")
    assert advances(rt) == ["main.greeting", "main.hours", "main.goodbye"]


async def test_a_global_transition_only_function_is_an_interrupt() -> None:
    playbook, _ = convert("library_flow.yaml")
    rt = Runtime(playbook, ScriptedDirector([{"interrupt": "talk_to_a_person"}]),
                 ScriptedTalker(["Hello."]), now=NOW)
    await rt.start()
    turn = await rt.user_turn("can I talk to a real person")
    assert turn.ended and turn.outcome == "goodbye"


# --- the branching flow ---------------------------------------------------------------------


def test_the_pizza_flow_maps_branches_to_a_pipeline_step_with_expr_rules() -> None:
    playbook, report = convert("pizza_flow.json", handlers=handlers())
    start = playbook.checkpoint("main.start")
    assert start.say_verbatim == "Forno Rosso, this is Pia."
    assert start.pipeline == "start__enter"
    assert [s.tool for s in playbook.pipeline("start__enter").steps] == ["open_ticket"]
    assert set(start.slots) == {"size", "topping", "extra_cheese"}
    assert start.slots["size"].type == "enum" and start.slots["size"].values == ["small", "large"]
    assert start.slots["extra_cheese"].type == "bool" and not start.slots["extra_cheese"].required
    assert start.slots["topping"].description.startswith("The main topping")
    rule = start.advance_when[0]
    assert rule.when == "Check that the pizza the caller wants is available today."
    assert rule.requires == ["size", "topping"] and rule.to == "main.start__check_pizza"
    step = playbook.checkpoint("main.start__check_pizza")
    assert step.pipeline == "start__check_pizza__run"
    (pipe_step,) = playbook.pipeline(step.pipeline).steps
    assert pipe_step.tool == "check_pizza" and pipe_step.on == {"failed": "main.start"}
    assert [(r.judge, r.to) for r in step.advance_when] == [
        ("expr", "main.confirm"), ("expr", "main.sold_out"), ("expr", "main.start")]
    assert playbook.tool("check_pizza").store_response_as == "check_pizza"
    # pipecat's templates read the slots now
    assert "{{ slots.size }} {{ slots.topping }}" in playbook.checkpoint("main.confirm").guidance
    text = "\n".join(report)
    assert "play_jingle" in text and "not mapped" in text
    assert "delivery_estimate" in text and "stays on the node" in text
    assert "python tools to register: check_pizza, open_ticket, place_order" in text


async def test_the_pizza_playbook_runs_through_its_branches_to_done() -> None:
    playbook, _ = convert("pizza_flow.json", handlers=handlers())
    stock = {"margherita": "sold_out", "diavola": "ok"}
    calls: list[str] = []

    def check_pizza(args: dict[str, Any], state: Any) -> dict[str, Any]:
        calls.append("check_pizza")
        return {"status": stock[state.slots["topping"].value]}

    def place_order(args: dict[str, Any], state: Any) -> dict[str, Any]:
        calls.append("place_order")
        return {"placed": state.slots["confirmed"].value}  # a bool, matching the "true" case

    def open_ticket(args: dict[str, Any], state: Any) -> dict[str, Any]:
        calls.append("open_ticket")
        return {}

    director = ScriptedDirector([
        {"slots": {"size": "large", "topping": "margherita"}, "advance": "main.start__check_pizza"},
        {"advance": "main.start"},
        {"slots": {"topping": "diavola"}, "advance": "main.start__check_pizza"},
        {"slots": {"confirmed": True}, "advance": "main.confirm__place_order"},
    ])
    talker = ScriptedTalker(["Sure.", "Which topping instead?", "One moment.",
                             "A large diavola, right?", "Great."])
    rt = Runtime(playbook, director, talker, now=NOW, barrier_timeout=2.0,
                 python_tools={"check_pizza": check_pizza, "place_order": place_order,
                               "open_ticket": open_ticket})
    opening = await rt.start()
    assert opening.text == "Forno Rosso, this is Pia."
    sold_out = await rt.user_turn("a large margherita please")
    assert sold_out.checkpoint == "main.sold_out"
    assert "Sorry, that one is sold out today." in sold_out.text
    again = await rt.user_turn("ok, let me choose again")
    assert again.checkpoint == "main.start"
    confirm = await rt.user_turn("a diavola then")
    assert confirm.checkpoint == "main.confirm"
    # the guidance template read the slots for the read-back
    view = talker.requests[-1].messages[0]["content"]
    assert "large diavola" in view
    done = await rt.user_turn("yes")
    assert done.ended and done.outcome == "done"
    assert done.text.endswith("Your pizza is on its way. Ciao!")
    assert calls == ["open_ticket", "check_pizza", "open_ticket", "check_pizza", "place_order"]
    assert advances(rt) == [
        "main.start", "main.start__check_pizza", "main.sold_out", "main.start",
        "main.start__check_pizza", "main.confirm", "main.confirm__place_order", "main.done"]


async def test_a_failing_function_goes_back_to_its_node() -> None:
    playbook, _ = convert("pizza_flow.json", handlers=handlers())

    def broken(args: dict[str, Any], state: Any) -> dict[str, Any]:
        raise RuntimeError("oven offline")

    rt = Runtime(playbook, ScriptedDirector([
        {"slots": {"size": "small", "topping": "diavola"}, "advance": "main.start__check_pizza"}]),
        ScriptedTalker(["Hm."]), now=NOW,
        python_tools={"check_pizza": broken, "place_order": broken, "open_ticket": lambda a: {}})
    await rt.start()
    turn = await rt.user_turn("small diavola")
    assert turn.checkpoint == "main.start"
    assert advances(rt)[-2:] == ["main.start__check_pizza", "main.start"]


def test_without_handlers_the_rules_carry_no_slots_and_the_report_says_so() -> None:
    playbook, report = convert("pizza_flow.json")
    start = playbook.checkpoint("main.start")
    assert start.slots == {} and start.advance_when[0].requires == []
    assert start.advance_when[0].when == "The caller wants to check pizza."
    text = "\n".join(report)
    assert "'check_pizza': no --handlers module given, so its rule carries no slots" in text
    # {{ size }} cannot be a slot without the handler's parameters
    assert "{{ size }} reads pipecat flow state" in text


# --- case keys, signatures, errors ----------------------------------------------------------


def test_case_keys_are_normalised_like_pipecat() -> None:
    doc = read_flow_file(PIPECAT / "pizza_flow.json")
    doc["nodes"]["confirm"]["functions"][0]["transition_to"]["cases"] = {True: "done", "FALSE": "sold_out"}
    conversion = convert_flow_config(doc, handlers=handlers())
    step = next(cp for cp in conversion.document["journeys"]["main"]["checkpoints"]
                if cp["id"] == "confirm__place_order")
    whens = [r["when"] for r in step["advance_when"]]
    assert whens[0] == 'results.place_order.data.placed in [True, "true", "True", "TRUE"]'
    assert whens[1] == 'results.place_order.data.placed in [False, "false", "False", "FALSE"]'
    Playbook.from_dict(conversion.document)


def test_handler_signatures_become_slot_specs() -> None:
    def book(flow_manager: Any, day: str, guests: int, note: str | None = None) -> None:
        """Book a table.

        Args:
            day: The day,
                as the caller said it.
            guests: How many.
        """

    info = handler_info(book)
    assert info.summary == "Book a table."
    assert info.slots == {
        "day": {"type": "str", "required": True, "description": "The day, as the caller said it."},
        "guests": {"type": "int", "required": True, "description": "How many."},
        "note": {"type": "str"},
    }
    assert info.required == ["day", "guests"]


def test_an_invalid_flow_config_lists_every_problem_with_its_path() -> None:
    doc = {
        "initial_node": "nowhere",
        "nodes": {"a": {"task_messages": [], "functions": [
            {"name": "go", "transition_only": True, "transition_to": "b"},
            {"name": "go", "transition_to": {"field": "x", "cases": {"1": "a"}}},
        ], "colour": "red"}},
    }
    with pytest.raises(PlaybookError) as info:
        parse_flow_config(doc)
    assert [str(p) for p in info.value.problems] == [
        "nodes.a.colour: unknown key (FlowConfig refuses keys it does not define)"]
    del doc["nodes"]["a"]["colour"]
    with pytest.raises(PlaybookError) as info:
        parse_flow_config(doc)
    text = [str(p) for p in info.value.problems]
    assert any(t.startswith("initial_node: 'nowhere' is not a node") for t in text), text
    assert "nodes.a.functions: function 'go' is listed twice (keep one)" in text
    assert any(t.startswith("nodes.a.functions[0].transition_to: unknown node 'b'") for t in text)
    assert any(t.startswith("nodes.a.functions[0].description: a transition_only") for t in text)


def test_the_loader_points_a_flow_config_to_convert() -> None:
    with pytest.raises(PlaybookError, match="superdialog-livekit convert"):
        Playbook.load(PIPECAT / "pizza_flow.json")


def test_node_settings_without_a_counterpart_are_reported() -> None:
    doc = read_flow_file(PIPECAT / "library_flow.yaml")
    doc["nodes"]["hours"]["respond_immediately"] = False
    doc["nodes"]["hours"]["role_message"] = "You are Ada, now reading the timetable."
    doc["nodes"]["hours"]["post_actions"] = [{"type": "tts_say", "text": "One more thing."}]
    conversion = convert_flow_config(doc)
    text = "\n".join(str(p) for p in conversion.report)
    assert "nodes.hours.respond_immediately: false is not mapped" in text
    assert "nodes.hours.role_message: differs from the persona" in text
    assert "nodes.hours.post_actions[0]: tts_say in post_actions is not mapped" in text
    hours = Playbook.from_dict(conversion.document).checkpoint("main.hours")
    assert hours.guidance.startswith("You are Ada, now reading the timetable.")
    assert hours.say_verbatim is None


def test_yaml_flow_configs_may_include_files_relative_to_themselves(tmp_path: Path) -> None:
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "nodes.yaml").write_text(
        "greet:\n  task_messages: !include greet_task.json\n"
        "  functions:\n    - {name: done, transition_only: true, description: All set., transition_to: bye}\n"
        "bye:\n  task_messages: [{role: system, content: Say bye.}]\n"
        "  post_actions: [{type: end_conversation}]\n")
    (tmp_path / "parts" / "greet_task.json").write_text('[{"role": "system", "content": "Say hi."}]')
    flow = tmp_path / "flow.yaml"
    flow.write_text("initial_node: greet\nnodes: !include parts/nodes.yaml\n")
    conversion = convert_flow_config(read_flow_file(flow))
    playbook = Playbook.from_dict(conversion.document)
    assert playbook.checkpoint("main.greet").goal == "Say hi."
    assert playbook.checkpoint("main.bye").terminal
    flow.write_text("initial_node: greet\nnodes: !include parts/missing.yaml\n")
    with pytest.raises(PlaybookError, match=r"!include parts/missing\.yaml: cannot read"):
        read_flow_file(flow)


async def test_a_global_function_with_code_runs_in_its_own_step() -> None:
    doc = read_flow_file(PIPECAT / "library_flow.yaml")
    doc["global_functions"].append({"name": "log_complaint", "transition_to": "goodbye"})
    conversion = convert_flow_config(doc)
    playbook = Playbook.from_dict(conversion.document)
    spec = playbook.interrupt("log_complaint")
    assert spec is not None and spec.to == "main.log_complaint__global"
    logged: list[str] = []
    rt = Runtime(playbook, ScriptedDirector([{"interrupt": "log_complaint"}]),
                 ScriptedTalker(["Oh no."]), now=NOW,
                 python_tools={"log_complaint": lambda args: logged.append("x") or {}})
    await rt.start()
    turn = await rt.user_turn("I want to complain about the noise")
    assert logged == ["x"] and turn.ended and turn.outcome == "goodbye"
    text = "\n".join(str(p) for p in conversion.report)
    assert "a failed 'log_complaint' call stays at the step log_complaint__global" in text


async def test_jinja_syntax_that_pipecat_reads_as_text_stays_text() -> None:
    """pipecat fills only ``{{ key }}``: ``{%``, ``{#`` or an unclosed ``{{`` in a task or a
    ``tts_say`` is plain text there, so the converted templates must keep it as text."""
    said = "Press {# or say 10{% off, or {{ unclosed \U0001f355 {"
    doc = {"initial_node": "start", "nodes": {
        "start": {"task_messages": [{"role": "system",
                                     "content": "Offer {{{ item }} at 10{% off {# not a comment"}],
                  "pre_actions": [{"type": "tts_say", "text": said}],
                  "functions": [{"name": "bye", "transition_only": True,
                                 "description": "The caller is done.", "transition_to": "end"}]},
        "end": {"task_messages": [{"role": "system", "content": "Say goodbye."}],
                "pre_actions": [{"type": "end_conversation", "text": "Bye {% now"}]}}}
    conversion = convert_flow_config(doc, name="jinja_text")
    playbook = Playbook.from_yaml(conversion.to_yaml())
    rt = Runtime(playbook, ScriptedDirector([{"advance": "main.end"}]),
                 ScriptedTalker(["Sure.", "Ok."]), now=NOW)
    opening = await rt.start()
    assert opening.text == said
    turn = await rt.user_turn("that's all")
    await rt.wait_idle()
    spoken = [e.text for e in rt.log if isinstance(e, ev.Utterance) and e.role == "assistant"]
    assert "Bye {% now" in spoken, (turn, spoken)
    assert rt.state.ended
