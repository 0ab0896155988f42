"""The author's tools on the command line: ``replay`` and ``convert`` (SPEC §12).

``replay`` reads a JSONL log written by a real scripted call (``Runtime`` with the models of
``tests/fixtures/scripts/replay_call.yaml``), re-runs a ``scripted:`` Director and exits 0 without
drift, 1 with drift (naming the turn), 2 on bad input; ``--json`` is the same report as data,
and two runs print the same bytes. ``convert`` writes playbooks that load, with the report on
stderr.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from superdialog_core import Playbook, Runtime
from superdialog_core.format.yaml12 import dump_yaml_text, load_yaml
from superdialog_core.roles.scripts import scripted_caller, scripted_director, scripted_talker
from test_replay import CALL, NOW, PLAYBOOK

from superdialog_livekit.cli import main

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PIPECAT = FIXTURES / "pipecat"


@pytest.fixture(scope="module")
def call_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    async def run() -> str:
        rt = Runtime(Playbook.load(PLAYBOOK), scripted_director(CALL), scripted_talker(CALL),
                     now=NOW, barrier_timeout=2.0)
        await rt.start()
        caller = scripted_caller(CALL)
        while (line := caller.next_line()) is not None:
            await rt.user_turn(line)
        await rt.wait_idle()
        return rt.log.to_jsonl()

    path = tmp_path_factory.mktemp("logs") / "call.jsonl"
    path.write_text(asyncio.run(run()))
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def director_file(tmp_path: Path, edit: Any = None) -> str:
    verdicts = load_yaml(CALL.read_text())["director"]
    if edit is not None:
        edit(verdicts)
    path = tmp_path / "director.yaml"
    path.write_text(dump_yaml_text(verdicts))
    return f"scripted:{path}"


# --- replay ---------------------------------------------------------------------------------


def test_replay_without_drift_exits_0(call_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "replay", str(call_log), str(PLAYBOOK),
                             "--director", f"scripted:{CALL}")
    assert code == 0, out + err
    assert "playbook: the version the log was written with" in out
    assert out.count("  same\n") == 5
    assert out.rstrip().endswith("no drift in 5 turns")
    assert '  refused party_size: ' in out  # the logged refusal, shown on both sides
    assert "advance to table.name blocked (requires not met)" in out


def test_replay_output_is_stable(call_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("replay", str(call_log), str(PLAYBOOK), "--director", f"scripted:{CALL}")
    first = run_cli(capsys, *argv)
    second = run_cli(capsys, *argv)
    assert first == second
    first_json = run_cli(capsys, *argv, "--json")
    assert first_json == run_cli(capsys, *argv, "--json")


def test_replay_with_a_changed_director_names_the_turn_and_exits_1(
        call_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def change(verdicts: list[Any]) -> None:
        verdicts[2]["slots"]["party_size"] = 6

    code, out, _ = run_cli(capsys, "replay", str(call_log), str(PLAYBOOK),
                           "--director", director_file(tmp_path, change))
    assert code == 1
    assert 'turn 3 (v' in out and "DRIFT (slots)" in out
    row = next(line for line in out.splitlines() if "slot party_size = 4" in line and "≠" in line)
    assert row.rstrip().endswith("slot party_size = 6 (accepted)")
    assert out.rstrip().splitlines()[-1].startswith("drift in 1 of 5 turns: turn 3 (v")


def test_replay_json_reports_the_drift_for_ci(
        call_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def change(verdicts: list[Any]) -> None:
        verdicts[0] = {}

    code, out, _ = run_cli(capsys, "replay", str(call_log), str(PLAYBOOK), "--json",
                           "--director", director_file(tmp_path, change))
    assert code == 1
    data = json.loads(out)
    assert data["drift"] is True and data["drifted_turns"] == [1]
    assert data["turns"][0]["drift"] == ["advance"]
    assert data["turns"][0]["logged"]["advance"]["to"] == "table.collect"
    assert data["turns"][0]["replayed"]["advance"] is None
    assert data["playbook"]["same"] is True and data["log"] == str(call_log)


def test_replay_against_a_changed_playbook_names_the_log_as_older(
        call_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = load_yaml(PLAYBOOK.read_text())
    doc["journeys"]["table"]["checkpoints"][2]["gate"] = "soft"
    changed = tmp_path / "booking_v2.yaml"
    changed.write_text(dump_yaml_text(doc))
    code, out, _ = run_cli(capsys, "replay", str(call_log), str(changed),
                           "--director", f"scripted:{CALL}")
    assert code == 1
    assert "note: the log was written by an older or other version of this playbook" in out
    assert "turn 4 (v" in out and "drift in 1 of 5 turns" in out


def test_replay_refuses_bad_input_with_exit_2(
        call_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "replay", str(tmp_path / "none.jsonl"), str(PLAYBOOK),
                           "--director", f"scripted:{CALL}")
    assert code == 2 and "cannot read the log" in err
    torn = tmp_path / "torn.jsonl"
    torn.write_text(call_log.read_text()[:-30])
    code, _, err = run_cli(capsys, "replay", str(torn), str(PLAYBOOK), "--director", f"scripted:{CALL}")
    assert code == 2 and "corrupt event log" in err and "line" in err
    code, _, err = run_cli(capsys, "replay", str(call_log), str(PLAYBOOK),
                           "--director", f"scripted:{tmp_path / 'missing.yaml'}")
    assert code == 2 and "file not found" in err


# --- convert --------------------------------------------------------------------------------


def test_convert_writes_a_playbook_that_loads_and_reports_to_stderr(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "pizza.yaml"
    code, out, err = run_cli(capsys, "convert", str(PIPECAT / "pizza_flow.json"), "-o",
                             str(out_file), "--handlers", str(PIPECAT / "pizza_handlers.py"))
    assert code == 0, err
    assert out == ""
    playbook = Playbook.load(out_file)
    assert set(playbook.checkpoint("main.start").slots) == {"size", "topping", "extra_cheese"}
    assert f"→ {out_file}" in err and "checkpoints" in err
    assert "play_jingle" in err and "python tools to register" in err


def test_convert_to_stdout_without_handlers(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "convert", str(PIPECAT / "library_flow.yaml"))
    assert code == 0, err
    playbook = Playbook.from_yaml(out)
    assert playbook.checkpoint("main.goodbye").terminal


def test_convert_a_legacy_flow_through_the_flow_compiler(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "legacy.yaml"
    code, _, err = run_cli(capsys, "convert", str(FIXTURES / "legacy_flow.json"), "-o", str(out_file))
    assert code == 0, err
    assert "(legacy flow)" in err
    assert Playbook.load(out_file) == Playbook.load(FIXTURES / "legacy_flow.json")
    assert "CoverageEntry(" not in err  # the report is for a reader, not a repr


def test_converting_a_legacy_flow_reports_only_what_did_not_map(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = FIXTURES / "superdialog_schema_flow.json"
    gaps = Playbook.load(source).coverage_gaps
    assert gaps, "the fixture has coverage gaps"
    code, _, err = run_cli(capsys, "convert", str(source), "-o", str(tmp_path / "out.yaml"))
    assert code == 0, err
    assert "nodes.welcome → " in err and "renders empty in speech" in err
    mapped = [e.source for e in Playbook.load(source).coverage if e.mapped]
    assert not any(f"  - {name} → " in err for name in mapped), err


def test_convert_refuses_a_bad_flow_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("initial_node: a\nnodes:\n  a:\n    task_mesages: []\n")
    code, _, err = run_cli(capsys, "convert", str(bad))
    assert code == 1
    assert "nodes.a.task_mesages: unknown key" in err and "nodes.a.task_messages: is required" in err
    code, _, err = run_cli(capsys, "convert", str(PIPECAT / "pizza_flow.json"), "--handlers",
                           "no_such_module_here")
    assert code == 1 and "cannot import it" in err


def test_convert_imports_handlers_by_module_name(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.syspath_prepend(str(PIPECAT))
    code, out, err = run_cli(capsys, "convert", str(PIPECAT / "pizza_flow.json"),
                             "--handlers", "pizza_handlers")
    assert code == 0, err
    rule = Playbook.from_yaml(out).checkpoint("main.start").advance_when[0]
    assert rule.requires == ["size", "topping"]
