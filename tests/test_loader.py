"""Loading: every format and example loads, round-trips through to_yaml, and YAML is read as 1.2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from superdialog_core import Playbook, PlaybookError
from superdialog_core.format.loader import detect_format, load_document, load_text
from superdialog_core.format.yaml12 import dump_yaml_text, load_yaml

from tests.paths import EXAMPLES as EXAMPLES_DIR

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml"))
PLAYBOOKS = sorted((Path(__file__).parent.parent / "playbooks").glob("*.y*ml"))
ALL_FILES = [
    *EXAMPLES,
    *PLAYBOOKS,
    FIXTURES / "full_booking.yaml",
    FIXTURES / "simple_booking.yaml",
    FIXTURES / "legacy_flow.json",
]

MINIMAL = """
journeys:
  main:
    checkpoints:
      - id: ask
        goal: no
        guidance: "Say the shop opens at {{ slots.opening | default('10:30') }}"
        slots:
          opening: {type: time, description: 10:30}
        advance_when:
          - {when: "slots.opening == '10:30'", judge: expr, to: main.done}
      - {id: done, terminal: true, outcome: yes}
"""


def _ids(path: Path) -> str:
    return path.name


@pytest.mark.parametrize("path", ALL_FILES, ids=_ids)
def test_every_example_and_fixture_loads(path: Path) -> None:
    playbook = Playbook.load(path)
    assert playbook.checkpoints, path
    assert playbook.source_path == str(path)
    assert all(p.severity == "warning" for p in playbook.warnings)


@pytest.mark.parametrize("path", ALL_FILES, ids=_ids)
def test_load_dump_load_is_identity(path: Path) -> None:
    playbook = Playbook.load(path)
    again = Playbook.from_yaml(playbook.to_yaml())
    assert again == playbook
    assert again.to_yaml() == playbook.to_yaml()


def test_round_trip_detects_a_difference() -> None:
    """Equality is not vacuous: a changed goal makes the reloaded playbook differ."""
    playbook = Playbook.from_yaml(MINIMAL)
    changed = Playbook.from_yaml(playbook.to_yaml().replace("goal: 'no'", "goal: 'yes'"))
    assert changed != playbook


def test_yaml12_scalars_in_the_full_format() -> None:
    playbook = Playbook.from_yaml(MINIMAL)
    ask = playbook.checkpoint("main.ask")
    assert ask.goal == "no"
    assert ask.slots["opening"].description == "10:30"
    assert playbook.checkpoint("main.done").outcome == "yes"


def test_yaml12_scalars_for_every_loader(tmp_path: Path) -> None:
    yaml_file = tmp_path / "shop.yaml"
    yaml_file.write_text(MINIMAL)
    sniffed = tmp_path / "shop.playbook"
    sniffed.write_text(MINIMAL)
    loaded = [Playbook.from_yaml(MINIMAL), Playbook.load(yaml_file), Playbook.load(sniffed),
              Playbook.from_dict(load_yaml(MINIMAL))]
    for playbook in loaded:
        assert playbook.checkpoint("main.ask").goal == "no"
        assert playbook.checkpoint("main.ask").slots["opening"].description == "10:30"
    simple = Playbook.from_yaml("playbook:\n  - {id: ask, purpose: no, say: 10:30}\n")
    assert simple.checkpoint("main.ask").goal == "no"
    assert simple.checkpoint("main.ask").guidance == "10:30"


def test_yaml12_keys_on_stay_strings() -> None:
    playbook = Playbook.load(FIXTURES / "full_booking.yaml")
    steps = playbook.pipeline("check_and_hold").steps
    assert set(steps[0].on) == {"ok", "failed", "http_404"}


def test_yaml12_loader_details() -> None:
    data = load_yaml("a: on\nb: 0o17\nc: 017\nd: 0x1f\ne: ~\nf:\ng: TRUE\nh: 2026-12-01\ni: 1e3\n")
    assert data == {"a": "on", "b": 15, "c": 17, "d": 31, "e": None, "f": None, "g": True,
                    "h": "2026-12-01", "i": 1000.0}


def test_yaml_duplicate_keys_are_refused() -> None:
    with pytest.raises(PlaybookError) as err:
        Playbook.from_yaml("name: a\nname: b\njourneys: {}\n")
    assert "duplicate key 'name'" in str(err.value)
    assert "line 2" in err.value.problems[0].message


def test_dumper_quotes_what_yaml11_or_12_readers_misread() -> None:
    values = {"goal": "no", "time": "10:30", "key": "on", "octal": "0o17", "flag": "yes",
              "day": "2026-12-01", "null": "null", "float": "1e3", "multi": "a\nb\n"}
    text = dump_yaml_text(values)
    assert yaml.safe_load(text) == values  # a YAML 1.1 reader
    assert load_yaml(text) == values  # our 1.2 reader
    playbook = Playbook.from_yaml(MINIMAL)
    assert yaml.safe_load(playbook.to_yaml())["journeys"]["main"]["checkpoints"][0]["goal"] == "no"


def test_json_duplicate_keys_are_refused() -> None:
    with pytest.raises(PlaybookError, match="duplicate key 'journeys'"):
        Playbook.from_json('{"journeys": {}, "journeys": {}}')


def test_yaml_syntax_error_names_line_and_column() -> None:
    with pytest.raises(PlaybookError) as err:
        Playbook.from_yaml("journeys:\n  main:\n    checkpoints: [\n      {id: a\n")
    problem = err.value.problems[0]
    assert "YAML syntax error at line" in problem.message
    assert "column" in problem.message


def test_json_syntax_error_names_line_and_column() -> None:
    with pytest.raises(PlaybookError) as err:
        Playbook.from_json('{"journeys": {\n  "main": }\n}')
    assert err.value.problems[0].message.startswith("JSON syntax error at line 2, column 11")


def test_top_level_must_be_a_mapping() -> None:
    with pytest.raises(PlaybookError, match="mapping at the top level"):
        Playbook.from_yaml("- a\n- b\n")
    with pytest.raises(PlaybookError, match="empty document"):
        Playbook.from_yaml("")


def test_missing_file_is_a_playbook_error(tmp_path: Path) -> None:
    with pytest.raises(PlaybookError, match="file not found"):
        Playbook.load(tmp_path / "nope.yaml")


def test_format_detection() -> None:
    assert detect_format({"playbook": [{"id": "a"}]}) == "simple"
    assert detect_format({"playbook": []}) == "full"
    assert detect_format({"initial_node": "a", "nodes": []}) == "flow"
    assert detect_format({"initial_node": "a", "nodes": {"a": {}}}) == "pipecat"
    assert detect_format({"journeys": {}}) == "full"


def test_empty_simple_playbook_fails_as_full_format() -> None:
    with pytest.raises(PlaybookError) as err:
        Playbook.from_dict({"playbook": []})
    paths = {p.path for p in err.value.problems}
    assert "journeys" in paths and "playbook" in paths


def test_pipecat_flowconfig_points_to_convert() -> None:
    doc = {"initial_node": "greet", "nodes": {"greet": {"task_messages": [{"role": "system", "content": "hi"}]}}}
    with pytest.raises(PlaybookError) as err:
        Playbook.from_json(json.dumps(doc))
    message = err.value.problems[0].message
    assert "pipecat-flows FlowConfig" in message
    assert "superdialog-livekit convert FILE" in message


def test_env_var_refs_are_kept_by_to_yaml_and_warned_when_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SD_TEST_TOKEN", raising=False)
    text = MINIMAL + "env:\n  TOKEN: 'Bearer ${SD_TEST_TOKEN}'\n"
    playbook = Playbook.from_yaml(text)
    assert "${SD_TEST_TOKEN}" in playbook.to_yaml()
    assert Playbook.from_yaml(playbook.to_yaml()).env["TOKEN"] == "Bearer ${SD_TEST_TOKEN}"
    [warning] = [w for w in playbook.warnings if "SD_TEST_TOKEN" in w.message]
    assert warning.path == "env.TOKEN"
    assert warning.severity == "warning"
    monkeypatch.setenv("SD_TEST_TOKEN", "x")
    assert not [w for w in Playbook.from_yaml(text).warnings if "SD_TEST_TOKEN" in w.message]


def test_compiled_artifacts_are_attached() -> None:
    playbook = Playbook.load(FIXTURES / "full_booking.yaml")
    collect = playbook.checkpoint("booking.collect")
    assert collect.advance_when[0]._expr is not None
    assert collect.advance_when[0]._expr.evaluate(
        {"slots": {"party_size": 2, "date": "2026-12-01", "time": "19:00"}}) is True
    assert collect.advance_when[1]._expr is None  # an llm rule has no expression
    assert collect._guidance is not None and collect._exit_say is not None
    assert playbook.checkpoint("booking.done")._say_verbatim is not None
    hold = playbook.tool("hold")
    assert hold._when is not None and hold._url is not None and hold._body is not None
    assert playbook.tool("availability")._headers["Authorization"] is not None
    assert set(playbook._views) == {"free_times", "party_label"}


def test_rule_ids_default_and_survive_the_round_trip() -> None:
    playbook = Playbook.from_yaml(MINIMAL)
    assert playbook.checkpoint("main.ask").advance_when[0].id == "main.ask.0"
    assert Playbook.from_yaml(playbook.to_yaml()).checkpoint("main.ask").advance_when[0].id == "main.ask.0"


def test_load_text_sniffs_json() -> None:
    doc = {"journeys": {"main": {"checkpoints": [{"id": "only", "terminal": True}]}}}
    assert load_text(Playbook, json.dumps(doc)).initial_ref == "main.only"
    assert load_document(Playbook, doc).initial_ref == "main.only"


TRICKY = ["no", "yes", "on", "off", "~", "null", "10:30", "0o17", "017", "1e3", ".inf", "2026-12-01",
          "- x", "a: b", "# c", "'q'", '"d"', "  lead", "trail  ", "x\ny\n", "\tt", "é ü 漢", "!tag", "&a", "*b",
          "{x}", "[y]", "", " ", "%p", "@at", "`tick`", "|", ">", "True", "FALSE"]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(TRICKY), st.text(max_size=20)), min_size=3, max_size=3))
def test_round_trip_keeps_any_string(values: list[str]) -> None:
    goal, persona, description = values
    doc = {"persona": persona, "journeys": {"main": {"checkpoints": [
        {"id": "only", "goal": goal, "terminal": True, "slots": {"x": {"description": description}}}]}}}
    playbook = Playbook.from_dict(doc)
    text = playbook.to_yaml()
    again = Playbook.from_yaml(text)
    assert again == playbook
    assert again.checkpoint("main.only").goal == goal
    assert yaml.safe_load(text)["journeys"]["main"]["checkpoints"][0].get("goal", "") == goal


def test_validate_cli_prints_every_kind_of_problem(tmp_path: Path) -> None:
    """`superdialog-livekit validate`: an unknown key, bad values, a missing key, a bad ref and an
    expression error all come out of one run, each with its dotted path."""
    import subprocess
    import sys

    broken = tmp_path / "broken.yaml"
    broken.write_text(
        "journeys:\n  main:\n    checkpoints:\n"
        "      - id: ask\n        gate: medium\n        turn_budget: x\n        advance_when:\n"
        "          - {when: 'slots.nope', judge: expr, to: main.dnoe}\n"
        "          - {when: done, judge: llmm, to: main.done}\n"
        "          - {when: no target}\n"
        "      - {id: done, terminal: true, outcom: finished}\n"
    )
    result = subprocess.run([sys.executable, "-m", "superdialog_livekit", "validate", str(broken)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    for path in ["checkpoints[0].gate", "checkpoints[0].turn_budget", "checkpoints[0].advance_when[0].to",
                 "checkpoints[0].advance_when[0].when", "checkpoints[0].advance_when[1].judge",
                 "checkpoints[0].advance_when[2].to", "checkpoints[1].outcom"]:
        assert f"error: journeys.main.{path}:" in result.stdout, result.stdout
    assert "7 problem(s)" in result.stdout
