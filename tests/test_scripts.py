"""Script files behind ``scripted:<file.yaml>`` URIs (SPEC §12): checked whole when read."""

from __future__ import annotations

from pathlib import Path

import pytest
from superdialog_core import TalkerRequest
from superdialog_core.errors import ConfigError
from superdialog_core.roles.scripts import (
    ScriptedCaller,
    load_script,
    script_path,
    scripted_caller,
    scripted_director,
    scripted_talker,
)

CALL = Path(__file__).resolve().parent / "fixtures" / "scripts" / "replay_call.yaml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "script.yaml"
    path.write_text(text)
    return path


def test_a_list_file_plays_in_order_for_any_role(tmp_path: Path) -> None:
    path = write(tmp_path, "- yes\n- no\n- '4'\n")
    # YAML 1.2 scalars: yes/no stay the caller's words, not booleans
    assert load_script(path, "caller") == ["yes", "no", "4"]
    caller = scripted_caller(f"scripted:{path}")
    assert [caller.next_line(), caller.next_line(), caller.remaining] == ["yes", "no", 1]
    assert caller.next_line() == "4" and caller.next_line() is None


def test_a_mapping_file_scripts_each_role() -> None:
    assert load_script(CALL, "director")[0] == {"advance": "table.collect"}
    assert load_script(CALL, "talker")[0].startswith("Osteria Lume")
    assert len(load_script(CALL, "caller")) == 5


async def test_scripted_models_from_a_file_behave_like_the_engines_own() -> None:
    director = scripted_director(CALL)
    assert director.remaining == 5
    assert await director.decide(None) == {"advance": "table.collect"}  # type: ignore[arg-type]
    talker = scripted_talker(f"scripted:{CALL}")
    request = TalkerRequest(messages=[], purpose="opening", spoke_from_version=1)
    words = [w async for w in talker.speak(request)]
    assert "".join(words) == "Osteria Lume, Sam speaking. How can I help?" and len(words) == 8


@pytest.mark.parametrize(
    ("text", "role", "message"),
    [
        ("talker: [hi]\n", "director", "has no director: list"),
        ("{talkers: [hi]}\n", "talker", "unknown key 'talkers'"),
        ("just text\n", "talker", "must be a YAML list of reply strings, not a str"),
        ("- hi\n- {a: 1}\n", "talker", "[1]: is a dict; a talker script holds strings"),
        ("- {slot: {x: 1}}\n", "director", "unknown verdict field 'slot' (did you mean 'slots'?"),
        ("- 3\n", "director", "[0]: is a int; a director script holds verdict mappings"),
        ("- [unclosed\n", "caller", "not valid YAML"),
    ],
)
def test_a_bad_script_is_refused_naming_the_file_and_item(
        tmp_path: Path, text: str, role: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_script(path, role)  # type: ignore[arg-type]
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_every_bad_item_is_listed_at_once(tmp_path: Path) -> None:
    path = write(tmp_path, "- 1\n- ok\n- [2]\n")
    with pytest.raises(ConfigError) as info:
        load_script(path, "caller")
    assert [p.path for p in info.value.problems] == [f"script {path}[0]", f"script {path}[2]"]


def test_an_empty_file_scripts_nothing(tmp_path: Path) -> None:
    assert load_script(write(tmp_path, ""), "director") == []


def test_uri_forms(tmp_path: Path) -> None:
    assert script_path("scripted:~/x.yaml") == Path.home() / "x.yaml"
    with pytest.raises(ConfigError, match="names no script file"):
        script_path("scripted:  ")
    with pytest.raises(ConfigError, match="file not found"):
        load_script(f"scripted:{tmp_path / 'nope.yaml'}", "talker")
    with pytest.raises(ValueError, match="role must be one of"):
        load_script(CALL, "narrator")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be strings"):
        ScriptedCaller(["ok", 3])  # type: ignore[list-item]
