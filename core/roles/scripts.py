"""Script files for ``scripted:<file.yaml>`` model URIs (SPEC §12).

A script is a YAML list used in order: Talker replies (strings), Director verdicts (mappings,
or strings returned as raw text to exercise the parser) or caller lines (strings). One file may
also script a whole conversation as a mapping with the lists under ``talker:``, ``director:``
and ``caller:``; the role that reads it takes its own list. YAML 1.2 scalars, as for
playbooks, so a caller line ``no`` stays the string ``"no"``.

``load_script`` checks the whole file when it is read, so a bad item fails before the first
turn with every problem listed (``ConfigError``), each naming the file and the item.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any, Literal

import yaml

from ..errors import ConfigError, Problem
from ..format.yaml12 import load_yaml
from .models import ScriptedDirector, ScriptedTalker, chunk_words
from .verdict import FIELDS

Role = Literal["talker", "director", "caller"]
ROLES: tuple[str, ...] = ("talker", "director", "caller")
SCHEME = "scripted:"


def script_path(uri: str) -> Path:
    """The file a ``scripted:<file>`` URI names (``~`` expanded; relative to the working dir)."""
    if not uri.startswith(SCHEME) or not uri[len(SCHEME):].strip():
        raise ConfigError([Problem(f"model URI {uri!r}", "names no script file",
                                   "write scripted:<file.yaml>, e.g. scripted:tests/verdicts.yaml")])
    return Path(os.path.expanduser(uri[len(SCHEME):].strip()))


def load_script(source: str | os.PathLike[str], role: Role) -> list[Any]:
    """The items of a script file for ``role``; ``ConfigError`` listing every problem.

    ``source`` is a path or a ``scripted:<file>`` URI.
    """
    return load_scripts(source, role)[role]


def load_scripts(source: str | os.PathLike[str], role: Role) -> dict[str, list[Any]]:
    """``role``'s items, plus every other role's of a mapping file (each checked whole).

    A list file scripts ``role`` only; a mapping file must have ``role``'s list.
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    path = script_path(source) if isinstance(source, str) and source.startswith(SCHEME) else Path(source)
    where = f"script {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([Problem(where, "file not found", "check the path after scripted:")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([Problem(where, f"cannot read it: {exc}")]) from exc
    try:
        doc = load_yaml(text)
    except yaml.YAMLError as exc:
        raise ConfigError([Problem(where, f"not valid YAML: {exc}")]) from exc
    if not isinstance(doc, dict):
        return {role: _items(role, where, doc)}
    unknown = [str(k) for k in doc if k not in ROLES]
    if unknown:
        raise ConfigError([Problem(where, f"unknown key {k!r}", f"use {', '.join(ROLES)}")
                           for k in unknown])
    if doc.get(role) is None:
        raise ConfigError([Problem(where, f"has no {role}: list",
                                   f"add `{role}:` with a list of {_WANTED[role]}, or pass a "
                                   "file that is one list")])
    return {name: _items(name, f"{where}, {name}", doc[name])
            for name in ROLES if doc.get(name) is not None}


def _items(role: str, where: str, items: Any) -> list[Any]:
    if items is None:
        return []  # an empty file scripts nothing: the Director answers {}, the Talker silence
    if not isinstance(items, list):
        raise ConfigError([Problem(where, f"must be a YAML list of {_WANTED[role]}, "
                                          f"not a {type(items).__name__}")])
    problems = [p for i, item in enumerate(items) for p in _check(role, where, i, item)]
    if problems:
        raise ConfigError(problems)
    return items


_WANTED = {
    "talker": "reply strings",
    "director": "verdict mappings (or raw strings)",
    "caller": "caller lines",
}


def _check(role: str, where: str, index: int, item: Any) -> list[Problem]:
    path = f"{where}[{index}]"
    if role != "director":
        if isinstance(item, str):
            return []
        return [Problem(path, f"is a {type(item).__name__}; a {role} script holds strings",
                        "quote the line, e.g. - \"yes\"")]
    if isinstance(item, str):
        return []  # raw text: the engine parses it like a model's answer
    if not isinstance(item, dict):
        return [Problem(path, f"is a {type(item).__name__}; a director script holds verdict "
                              "mappings (slots, confirm, deny, advance, interrupt, note) or strings")]
    problems = []
    for key in item:
        if key not in FIELDS:
            close = difflib.get_close_matches(str(key), FIELDS, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"verdict fields: {', '.join(FIELDS)}"
            problems.append(Problem(path, f"unknown verdict field {key!r}",
                                    hint + " (a raw string item tests other answers)"))
    return problems


class ScriptedCaller:
    """Plays caller lines in order (for ``eval`` and scripted chats); None once exhausted."""

    def __init__(self, lines: list[str]) -> None:
        bad = [i for i, line in enumerate(lines) if not isinstance(line, str)]
        if bad:
            raise TypeError(f"ScriptedCaller lines must be strings; items {bad} are not")
        self._lines = list(lines)
        self._next = 0

    @property
    def remaining(self) -> int:
        return len(self._lines) - self._next

    def next_line(self) -> str | None:
        """The next caller line, or None when the script is used up."""
        if self._next >= len(self._lines):
            return None
        line = self._lines[self._next]
        self._next += 1
        return line


def scripted_director(source: str | os.PathLike[str]) -> ScriptedDirector:
    """A ``ScriptedDirector`` playing the file's verdicts."""
    return ScriptedDirector(load_script(source, "director"))


def scripted_talker(source: str | os.PathLike[str]) -> ScriptedTalker:
    """A ``ScriptedTalker`` playing the file's replies."""
    return ScriptedTalker(load_script(source, "talker"))


def scripted_caller(source: str | os.PathLike[str]) -> ScriptedCaller:
    """A ``ScriptedCaller`` playing the file's caller lines."""
    return ScriptedCaller(load_script(source, "caller"))


__all__ = [
    "ROLES",
    "SCHEME",
    "ScriptedCaller",
    "chunk_words",
    "load_script",
    "load_scripts",
    "script_path",
    "scripted_caller",
    "scripted_director",
    "scripted_talker",
]
