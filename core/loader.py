"""Reading playbooks: parse, detect the format, lower to the full format, validate, compile.

Every way in (``Playbook.load``, ``from_yaml``, ``from_json``, ``from_dict``) ends in
``load_document``, so one set of rules applies to all of them: YAML 1.2 scalars, unknown keys
are errors, every problem is collected into one ``PlaybookError`` (errors first, then
warnings), and a playbook that loads has every expression and template compiled (SPEC §2-3).

Format detection (SPEC §2.1):

* simple format: ``playbook:`` is a non-empty list → ``simple.lower_simple``;
* legacy flow JSON: ``initial_node`` and ``nodes`` as a list → ``flow.compile_flow``;
* pipecat-flows FlowConfig: ``initial_node`` and ``nodes`` as a mapping → an error that points
  to ``superdialog-livekit convert``;
* anything else: the full format.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .errors import PlaybookError, Problem
from .playbook import Playbook
from .problems import drop_at, only_unknown_keys, problems_from_validation_error
from .yaml12 import dump_yaml_text, load_yaml

PIPECAT_MESSAGE = (
    "this looks like a pipecat-flows FlowConfig; convert it with "
    "`superdialog-livekit convert FILE` (not available yet)"
)


def load_path(path: str | os.PathLike[str]) -> Playbook:
    """Load a playbook file: YAML for ``.yaml``/``.yml``, JSON for ``.json``, else sniffed."""
    file = Path(path)
    source = str(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlaybookError(
            [Problem("", f"file not found: {source}", "check the path")], source
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlaybookError([Problem("", f"cannot read {source}: {exc}")], source) from exc
    suffix = file.suffix.lower()
    fmt = "yaml" if suffix in (".yaml", ".yml") else "json" if suffix == ".json" else None
    playbook = load_text(text, fmt=fmt, source=source)
    playbook._source_path = source
    return playbook


def load_text(text: str, fmt: str | None = None, source: str | None = None) -> Playbook:
    """Parse ``text`` as ``fmt`` (``"yaml"``, ``"json"`` or None to sniff) and load it."""
    if fmt is None:
        fmt = "json" if text.lstrip().startswith(("{", "[")) else "yaml"
    if fmt not in ("yaml", "json"):
        raise ValueError(f"fmt must be 'yaml', 'json' or None, not {fmt!r}")
    doc = _parse(text, fmt, source)
    return load_document(doc, source=source)


def _parse(text: str, fmt: str, source: str | None) -> Any:
    if fmt == "json":
        try:
            return json.loads(text, object_pairs_hook=_unique_keys)
        except _DuplicateKey as exc:
            raise PlaybookError([Problem("", f"JSON: duplicate key {exc.key!r}", "keep one of them")], source) from None
        except json.JSONDecodeError as exc:
            raise PlaybookError(
                [Problem("", f"JSON syntax error at line {exc.lineno}, column {exc.colno}: {exc.msg}")],
                source,
            ) from None
    try:
        return load_yaml(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = exc.problem or exc.context or "invalid YAML"
        hint = "YAML needs consistent indentation and `key: value` pairs; quote values with ': ' or '#'"
        raise PlaybookError([Problem("", f"YAML syntax error{where}: {what}", hint)], source) from None
    except yaml.YAMLError as exc:
        raise PlaybookError([Problem("", f"YAML syntax error: {exc}")], source) from None


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """JSON objects like YAML mappings: a repeated key is refused, never silently overwritten."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def detect_format(doc: Any) -> str:
    """``simple``, ``flow``, ``pipecat`` or ``full`` (see the module docstring)."""
    if isinstance(doc, dict):
        steps = doc.get("playbook")
        if isinstance(steps, list) and steps:
            return "simple"
        if "initial_node" in doc and "nodes" in doc:
            nodes = doc["nodes"]
            if isinstance(nodes, list):
                return "flow"
            if isinstance(nodes, dict):
                return "pipecat"
    return "full"


def load_document(doc: Any, source: str | None = None) -> Playbook:
    """Build, validate and compile a playbook from a parsed document of any format."""
    if not isinstance(doc, dict):
        kind = type(doc).__name__ if doc is not None else "an empty document"
        raise PlaybookError(
            [Problem("", f"a playbook must be a mapping at the top level, not {kind}",
                     "start with `journeys:` (full format) or `playbook:` (simple format)")],
            source,
        )
    fmt = detect_format(doc)
    coverage: list[str] | None = None
    if fmt == "pipecat":
        raise PlaybookError([Problem("", PIPECAT_MESSAGE)], source)
    if fmt == "simple":
        from .simple import lower_simple

        full, problems = lower_simple(doc)
        _raise_errors(problems, source)
    elif fmt == "flow":
        from .flow import compile_flow

        full, problems, coverage = compile_flow(doc)
        _raise_errors(problems, source)
    else:
        full, problems = doc, []
    playbook = build_playbook(full, source, extra_warnings=problems)
    playbook._coverage = coverage
    return playbook


def build_playbook(
    doc: dict[str, Any], source: str | None = None, extra_warnings: list[Problem] | None = None
) -> Playbook:
    """Validate a full-format document, run every check and compile; raise on any error."""
    from .validate import validate_playbook

    try:
        playbook = Playbook.model_validate(doc)
    except ValidationError as exc:
        problems = problems_from_validation_error(exc, Playbook)
        raise PlaybookError([*problems, *_checks_without_unknown_keys(doc, exc)], source) from None

    problems = [*(extra_warnings or []), *validate_playbook(playbook)]
    _raise_errors(problems, source)
    playbook._warnings = [p for p in problems if p.severity == "warning"]
    return playbook


def _checks_without_unknown_keys(doc: dict[str, Any], exc: ValidationError) -> list[Problem]:
    """When unknown keys were the only field errors, the other checks still run (on a copy
    without those keys), so one load reports every problem instead of one layer at a time."""
    from .validate import validate_playbook

    if not only_unknown_keys(exc):
        return []
    pruned = copy.deepcopy(doc)
    for err in exc.errors(include_url=False):
        drop_at(pruned, err["loc"])
    try:
        playbook = Playbook.model_validate(pruned)
    except ValidationError:
        return []
    return [p for p in validate_playbook(playbook) if p.severity == "error"]


def _raise_errors(problems: list[Problem], source: str | None) -> None:
    """Raise one PlaybookError (errors first, then warnings) when any problem is an error."""
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        warnings = [p for p in problems if p.severity != "error"]
        raise PlaybookError([*errors, *warnings], source)


def dump_document(playbook: Playbook) -> dict[str, Any]:
    """The full-format document of ``playbook`` (defaults left out, ``${VAR}`` kept)."""
    return playbook.model_dump(mode="json", by_alias=True, exclude_defaults=True)


def dump_yaml(playbook: Playbook) -> str:
    """The playbook as full-format YAML; loading it again gives an equal playbook."""
    return dump_yaml_text(dump_document(playbook))


__all__ = [
    "PIPECAT_MESSAGE",
    "build_playbook",
    "detect_format",
    "dump_document",
    "dump_yaml",
    "load_document",
    "load_path",
    "load_text",
]
