"""The CLI's validate, graph and schema commands, run as a real subprocess."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from superdialog_core.format.yaml12 import load_yaml

from tests.paths import EXAMPLES as EXAMPLES_DIR

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml"))
PLAYBOOKS = sorted((ROOT / "playbooks").glob("*.yaml"))
FIXTURES = sorted((ROOT / "tests" / "fixtures").glob("*.yaml"))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "superdialog_livekit", *args],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )


def test_examples_exist() -> None:
    assert len(EXAMPLES) >= 2 and len(PLAYBOOKS) >= 2


def test_validate_passes_every_example_and_playbook() -> None:
    result = cli("validate", *map(str, EXAMPLES + PLAYBOOKS))
    assert result.returncode == 0, result.stdout + result.stderr
    for path in EXAMPLES + PLAYBOOKS:
        assert f"✓ {path}" in result.stdout


def test_validate_prints_every_problem_with_its_path_and_exits_1(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        "journeys:\n"
        "  main:\n"
        "    checkpoints:\n"
        "      - id: ask\n"
        "        goal: ask\n"
        "        advance_when:\n"
        "          - {when: 'slots.nope', judge: expr, to: main.dnoe}\n"
        "      - id: done\n"
        "        terminal: true\n"
        "        outcom: finished\n"
    )
    result = cli("validate", str(broken), str(EXAMPLES[0]))
    assert result.returncode == 1
    out = result.stdout
    assert f"✗ {broken}" in out
    # All three problems come out of one run, each with its dotted path.
    assert "journeys.main.checkpoints[0].advance_when[0].to" in out and "main.done" in out
    assert "journeys.main.checkpoints[0].advance_when[0].when" in out and "nope" in out
    assert "journeys.main.checkpoints[1].outcom" in out and "outcome" in out
    # The valid file given alongside is still reported as valid.
    assert f"✓ {EXAMPLES[0]}" in out


def test_validate_unreadable_file_exits_1(tmp_path: Path) -> None:
    result = cli("validate", str(tmp_path / "missing.yaml"))
    assert result.returncode == 1
    assert "missing.yaml" in result.stdout


@pytest.fixture(scope="module")
def schema() -> dict:
    result = cli("schema")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_schema_is_a_oneof_of_full_and_simple(schema: dict) -> None:
    jsonschema.Draft202012Validator.check_schema(schema)
    assert len(schema["oneOf"]) == 2
    required = [set(s.get("required", [])) for s in schema["oneOf"]]
    assert {"journeys"} <= required[0] and {"playbook"} <= required[1]


@pytest.mark.parametrize("path", EXAMPLES + PLAYBOOKS + FIXTURES, ids=lambda p: p.name)
def test_schema_validates_every_example(schema: dict, path: Path) -> None:
    doc = load_yaml(path.read_text())
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(doc))
    assert not errors, [e.message for e in errors[:3]]


def test_schema_rejects_an_unknown_key(schema: dict) -> None:
    doc = load_yaml(EXAMPLES[0].read_text())
    doc["persnoa"] = "typo"
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(doc))


NODE = re.compile(r"^\s+(n_\w+)[\[\(\{]")
EDGE = re.compile(r"^\s+(\w+) (-->|-\.->|==>)(\|\"[^\"]*\"\|)? (\w+)$")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_graph_is_a_mermaid_flowchart_over_declared_nodes(path: Path) -> None:
    result = cli("graph", str(path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "flowchart TD"
    nodes = {m.group(1) for line in lines if (m := NODE.match(line))}
    nodes |= {"start", "any", "any_silence"}
    edges = [m for line in lines if (m := EDGE.match(line))]
    assert edges, result.stdout
    for edge in edges:
        assert edge.group(1) in nodes and edge.group(4) in nodes, edge.group(0)
    # Every checkpoint is a node; subgraphs are balanced.
    playbook_doc = load_yaml(path.read_text())
    steps = playbook_doc.get("playbook") or [
        cp for j in playbook_doc["journeys"].values() for cp in j["checkpoints"]
    ]
    assert len([n for n in nodes if n.startswith("n_")]) == len(steps)
    assert sum(line.strip().startswith("subgraph") for line in lines) == sum(
        line.strip() == "end" for line in lines
    )
