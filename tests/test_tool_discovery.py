"""Python tools are found the same way everywhere (issue 12, SPEC §10).

Order: an explicit ``python_tools=`` (or ``chat --tools FILE``), then ``$SUPERDIALOG_TOOLS``
(``module:attr`` or a file), then the sidecar ``<playbook>_tools.py``. A playbook whose
``type: python`` tools have no implementation is refused by ``Runtime`` with a ``ConfigError``
that names each missing tool and where it was looked for.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
from superdialog_core import Playbook, Runtime, ScriptedDirector, ScriptedTalker
from superdialog_core.errors import ConfigError
from superdialog_core.tools.discovery import ENV_VAR, PythonTools, find_python_tools

from superdialog_livekit import DialogMachineLLM
from tests.livekit_scripted import DirectorLLM, TalkerLLM

PLAYBOOK = """\
persona: "You are a test agent."
journeys:
  main:
    checkpoints:
      - id: start
        goal: "Take a payment"
        terminal: true
        outcome: done
tools:
  - {id: charge, type: python}
  - {id: refund, type: python}
"""


def _tools_file(path: Path, ids: list[str], tag: str = "file") -> Path:
    body = "".join(f"def {i}(args):\n    return {{'by': {tag!r}}}\n\n" for i in ids)
    path.write_text(body + "TOOLS = {" + ", ".join(f"{i!r}: {i}" for i in ids) + "}\n")
    return path


@pytest.fixture
def playbook_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv(ENV_VAR, raising=False)
    path = tmp_path / "pay.yaml"
    path.write_text(PLAYBOOK)
    return path


def test_the_sidecar_is_used_when_nothing_is_given(playbook_path: Path) -> None:
    sidecar = _tools_file(playbook_path.with_name("pay_tools.py"), ["charge", "refund"], "sidecar")
    found = find_python_tools(playbook_path)
    assert sorted(found) == ["charge", "refund"]
    assert found.source == str(sidecar)
    assert found["charge"]({}) == {"by": "sidecar"}


def test_the_environment_wins_over_the_sidecar_as_a_file_or_module_attr(
    playbook_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    _tools_file(playbook_path.with_name("pay_tools.py"), ["charge", "refund"], "sidecar")
    env_file = _tools_file(tmp_path / "env_tools.py", ["charge"], "env-file")
    found = find_python_tools(playbook_path, env={ENV_VAR: str(env_file)})
    assert found["charge"]({}) == {"by": "env-file"} and "refund" not in found
    assert found.source == f"${ENV_VAR}={env_file}"

    package = tmp_path / "pkg_for_tools"
    package.mkdir()
    _tools_file(package / "payments.py", ["charge", "refund"], "module")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = find_python_tools(playbook_path, env={ENV_VAR: "pkg_for_tools.payments:TOOLS"})
    assert found["refund"]({}) == {"by": "module"}
    sys.modules.pop("pkg_for_tools.payments", None)
    sys.modules.pop("pkg_for_tools", None)


def test_an_explicit_mapping_or_file_wins_over_everything(
    playbook_path: Path, tmp_path: Path,
) -> None:
    _tools_file(playbook_path.with_name("pay_tools.py"), ["charge", "refund"], "sidecar")
    env = {ENV_VAR: str(_tools_file(tmp_path / "env_tools.py", ["charge"], "env"))}

    def charge(args: dict) -> str:
        return "explicit"

    found = find_python_tools(playbook_path, {"charge": charge}, env=env)
    assert dict(found) == {"charge": charge}  # no merging with the sidecar or the environment
    given = _tools_file(tmp_path / "cli_tools.py", ["charge", "refund"], "cli")
    found = find_python_tools(playbook_path, str(given), explicit_name="--tools", env=env)
    assert found["refund"]({}) == {"by": "cli"} and found.source == f"--tools {given}"


@pytest.mark.parametrize("content, message", [
    ("TOOLS = {'charge': print", "SyntaxError"),
    ("raise RuntimeError('no database')", "RuntimeError: no database"),
    ("tools = {}", "defines no TOOLS"),
    ("TOOLS = ['charge']", "not a mapping"),
])
def test_a_tools_file_that_cannot_load_is_a_config_error_naming_it(
    playbook_path: Path, content: str, message: str,
) -> None:
    sidecar = playbook_path.with_name("pay_tools.py")
    sidecar.write_text(content + "\n")
    with pytest.raises(ConfigError) as info:
        find_python_tools(playbook_path)
    assert str(sidecar) in str(info.value) and message in str(info.value), str(info.value)


def test_bad_environment_values_are_config_errors(playbook_path: Path, tmp_path: Path) -> None:
    for value, message in [(str(tmp_path / "missing_tools.py"), "cannot read"),
                           ("no_such_module_for_tools:TOOLS", "ModuleNotFoundError"),
                           ("json:NOPE", "has no attribute 'NOPE'"),
                           ("just_a_name", "neither module:attr nor a .py file")]:
        with pytest.raises(ConfigError, match=ENV_VAR) as info:
            find_python_tools(playbook_path, env={ENV_VAR: value})
        assert message in str(info.value), str(info.value)


def test_runtime_refuses_missing_python_tools_naming_each_and_where_it_looked(
    playbook_path: Path, tmp_path: Path,
) -> None:
    playbook = Playbook.load(playbook_path)
    models = {"director": ScriptedDirector([]), "talker": ScriptedTalker(["Hi."])}
    found = find_python_tools(playbook_path, env={})
    with pytest.raises(ConfigError) as info:
        Runtime(playbook, python_tools=found, **models)
    problems = info.value.problems
    assert [p.path for p in problems] == ["tools[0]", "tools[1]"]
    assert "'charge' has no implementation" in problems[0].message
    assert "'refund' has no implementation" in problems[1].message
    for problem in problems:  # every place looked at, with what was found there
        assert "python_tools= (not given)" in problem.message
        assert f"${ENV_VAR} (not set)" in problem.message
        assert f"{tmp_path / 'pay_tools.py'} (not found)" in problem.message
        assert problem.hint and "TOOLS" in problem.hint
    # A plain mapping given to Runtime: it names what it was given.
    with pytest.raises(ConfigError) as info:
        Runtime(playbook, python_tools={"charge": print}, **models)
    assert [p.path for p in info.value.problems] == ["tools[1]"]
    assert "python_tools= (given: charge)" in info.value.problems[0].message
    # Everything there: it starts.
    assert Runtime(playbook, python_tools={"charge": print, "refund": print}, **models)


def test_dialog_machine_llm_given_a_path_finds_the_sidecar_and_logs_the_file(
    playbook_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    with pytest.raises(ConfigError, match="'charge' has no implementation"):
        DialogMachineLLM(playbook_path, talker=TalkerLLM([]), director=DirectorLLM([]))
    sidecar = _tools_file(playbook_path.with_name("pay_tools.py"), ["charge", "refund"])
    with caplog.at_level(logging.INFO, logger="superdialog_livekit"):
        dialog = DialogMachineLLM(str(playbook_path), talker=TalkerLLM([]), director=DirectorLLM([]))
    tools = dialog._options["python_tools"]
    assert isinstance(tools, PythonTools) and sorted(tools) == ["charge", "refund"]
    assert f"python tools from {sidecar}: charge, refund" in caplog.text
