"""What superdialog renders as empty loads with a warning; ``validate --strict`` refuses it.

Also: a dict from a YAML 1.1 reader loads like the file, and ``validate`` notes once per file
that checkpoints without ``gate:`` are soft here and hard in superdialog (SPEC §2.2, §12).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from superdialog_core import Playbook, PlaybookError

ROOT = Path(__file__).resolve().parents[1]

BASE = """
env: {TOKEN: "x"}
journeys:
  main:
    checkpoints:
      - id: ask
        gate: soft
        slots: {name: {type: str}}
        guidance: "GUIDANCE"
        advance_when: [{when: given, to: main.done}]
      - id: done
        terminal: true
        say_verbatim: Bye.
"""

# The three template findings superdialog renders as an empty string (SPEC §2.2).
RULES = {
    "undeclared slot": ("Ask for {{ slots.nmae }}.", "template reads undeclared slot 'nmae', which renders empty"),
    "env in speech": ("Token {{ env.TOKEN }}.", "speech template reads env, which renders empty"),
    "bare name": ("Ask for {{ name }}.", "template reads bare name 'name', which renders empty"),
}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "superdialog_livekit", *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_each_downgraded_rule_warns_on_load_and_fails_strict(tmp_path: Path) -> None:
    paths = {}
    for rule, (guidance, message) in RULES.items():
        path = paths[rule] = tmp_path / f"{rule.replace(' ', '_')}.yaml"
        path.write_text(BASE.replace("GUIDANCE", guidance))
        [warning] = Playbook.load(path).warnings
        assert warning.message.startswith(message), rule
        assert warning.path == "journeys.main.checkpoints[0].guidance"
        with pytest.raises(PlaybookError) as err:
            Playbook.load(path, strict=True)
        assert [(p.severity, p.message) for p in err.value.problems] == [("error", warning.message)]
    files = [str(p) for p in paths.values()]
    loose, strict = cli("validate", *files), cli("validate", "--strict", *files)
    assert loose.returncode == 0
    assert strict.returncode == 1
    for rule, path in paths.items():  # each file fails --strict on its own rule
        message = RULES[rule][1]
        assert f"✓ {path}" in loose.stdout and f"✗ {path}" in strict.stdout
        assert f"warning: journeys.main.checkpoints[0].guidance: {message}" in loose.stdout
        assert f"error: journeys.main.checkpoints[0].guidance: {message}" in strict.stdout


def test_a_clean_file_passes_strict(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(BASE.replace("GUIDANCE", "Ask for {{ slots.name | default('the name') }}."))
    assert Playbook.load(path, strict=True).warnings == []
    assert cli("validate", "--strict", str(path)).returncode == 0


def test_validate_notes_soft_default_gates_once_per_file_never_as_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(BASE.replace("GUIDANCE", "Hi.").replace("        gate: soft\n", ""))
    playbook = Playbook.load(path)
    assert playbook.warnings == []  # a note, not a warning
    out = cli("validate", "--strict", str(path))
    assert out.returncode == 0
    assert out.stdout.count("note: ") == 1
    assert "1 checkpoint(s) without gate: (main.ask) are soft here and hard in superdialog" in out.stdout
    path.write_text(BASE.replace("GUIDANCE", "Hi."))  # gate written: no note
    assert "note: " not in cli("validate", str(path)).stdout


YAML11 = textwrap.dedent("""
    journeys:
      main:
        checkpoints:
          - id: book
            pipeline: book
            advance_when: [{when: pipeline.ok, judge: expr, to: main.done}]
          - id: done
            terminal: true
    tools: [{id: create, url: "http://127.0.0.1:9/x"}]
    pipelines:
      - id: book
        steps: [{tool: create, on: {failed: main.done}}]
    handlers: [{id: paid, on: webhook.paid, pipeline: book}]
""")


def test_a_dict_from_a_yaml_1_1_reader_loads_like_the_file() -> None:
    parsed = yaml.safe_load(YAML11)
    assert True in parsed["pipelines"][0]["steps"][0]  # the YAML 1.1 reading of `on:`
    assert Playbook.from_dict(parsed) == Playbook.from_yaml(YAML11)
    playbook = Playbook.from_dict(parsed)
    assert playbook.pipeline("book").steps[0].on == {"failed": "main.done"}
    assert playbook.handlers[0].on == "webhook.paid"


def test_a_yaml_1_1_boolean_key_elsewhere_names_the_cause_and_the_fix() -> None:
    parsed = yaml.safe_load(YAML11 + "views: {yes: slots.x}\n")
    with pytest.raises(PlaybookError) as err:
        Playbook.from_dict(parsed)
    [problem] = err.value.problems
    assert problem.path == "views.True"
    assert "a YAML 1.1 reader (yaml.safe_load) reads the keys on/off/yes/no as booleans" in problem.message
    assert "quote the key" in (problem.hint or "")
