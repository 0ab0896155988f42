"""Reading playbooks: parse, detect the format, lower to the full format, validate, compile.

Every way in (``Playbook.load``, ``from_yaml``, ``from_json``, ``from_dict``) ends in
``load_document``, to which ``Playbook`` passes itself as ``model`` (so this module never imports
the models module, and the models module imports it only when a playbook is loaded), so one set of rules applies to all of them: YAML 1.2 scalars, unknown keys
are errors, every problem is collected into one ``PlaybookError`` (errors first, then
warnings), and a playbook that loads has every expression and template compiled (SPEC §2-3).
A pydantic error does not hide the other checks: they run on a best-effort repair of the
document (``problems.validate_best_effort``), so a user fixes everything in one go.

Format detection (SPEC §2.1):

* simple format: ``playbook:`` is a non-empty list → ``simple.lower_simple``;
* legacy flow JSON: ``initial_node`` and ``nodes`` as a list → ``flow.compile_flow``;
* pipecat-flows FlowConfig: ``initial_node`` and ``nodes`` as a mapping → an error that points
  to ``superdialog-livekit convert``;
* anything else: the full format.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from ..errors import PlaybookError, Problem
from .problems import join_path, validate_best_effort
from .yaml12 import dump_yaml_text, load_yaml

if TYPE_CHECKING:
    from .playbook import Playbook

PIPECAT_MESSAGE = (
    "this looks like a pipecat-flows FlowConfig; convert it with "
    "`superdialog-livekit convert FILE -o playbook.yaml` (add `--handlers <module>` to read "
    "its functions' parameters)"
)


def load_path(model: type[Playbook], path: str | os.PathLike[str], *, strict: bool = False) -> Playbook:
    """Load a playbook file: YAML for ``.yaml``/``.yml``, JSON for ``.json``, else sniffed.

    ``strict``: the template warnings superdialog renders as empty are errors (SPEC §2.2)."""
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
    playbook = load_text(model, text, fmt=fmt, source=source, strict=strict)
    playbook._source_path = source
    return playbook


def load_text(
    model: type[Playbook], text: str, fmt: str | None = None, source: str | None = None,
    *, strict: bool = False,
) -> Playbook:
    """Parse ``text`` as ``fmt`` (``"yaml"``, ``"json"`` or None to sniff) and load it."""
    if fmt is None:
        fmt = "json" if text.lstrip().startswith(("{", "[")) else "yaml"
    if fmt not in ("yaml", "json"):
        raise ValueError(f"fmt must be 'yaml', 'json' or None, not {fmt!r}")
    doc = _parse(text, fmt, source)
    return load_document(model, doc, source=source, strict=strict, yaml12=True)


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


def load_document(
    model: type[Playbook], doc: Any, source: str | None = None, *, strict: bool = False,
    yaml12: bool = False,
) -> Playbook:
    """Build, validate and compile a playbook from a parsed document of any format.

    Every problem comes out of one ``PlaybookError``: a format's own problems (unknown keys,
    bad values, unknown steps or nodes) do not stop the checks of the full format, which run
    on a best-effort lowering, with their paths mapped back to what the author wrote.
    """
    if not isinstance(doc, dict):
        kind = type(doc).__name__ if doc is not None else "an empty document"
        raise PlaybookError(
            [Problem("", f"a playbook must be a mapping at the top level, not {kind}",
                     "start with `journeys:` (full format) or `playbook:` (simple format)")],
            source,
        )
    if not yaml12:  # parsed by someone else's reader (from_dict): maybe YAML 1.1
        doc = _yaml11_keys(doc, source)
    fmt = detect_format(doc)
    coverage: list[Any] | None = None
    if fmt == "pipecat":
        raise PlaybookError([Problem("", PIPECAT_MESSAGE)], source)
    if fmt == "full":
        playbook = build_playbook(model, doc, source, strict=strict)
        playbook._gate_defaulted = [ref for ref, cp in playbook.checkpoints.items()
                                    if "gate" not in cp.model_fields_set and not cp.terminal]
        return playbook
    if fmt == "simple":
        from .simple import lower_simple_mapped  # only for this format (start-up time)

        full, problems, author_path = lower_simple_mapped(doc)
    else:
        from .flow import compile_flow, flow_author_path  # only for this format (start-up time)

        full, problems, coverage = compile_flow(doc)

        def author_path(path: str, full: dict[str, Any] = full) -> str:
            return flow_author_path(doc, full, path)

    if not full:
        _raise_errors(problems, source)
        raise PlaybookError(problems or [Problem("", "the playbook could not be read")], source)
    playbook, later = check_document(model, full)
    lowered_errors = any(p.severity == "error" for p in problems)
    for problem in later:
        if lowered_errors and problem.severity != "error" and not problem.strict:
            continue  # the lowering was best-effort: its graph warnings would mislead
        if _reported_by_the_format(problem):
            continue
        problems.append(dataclasses.replace(problem, path=author_path(problem.path)))
    problems = _strict(problems, strict)
    _raise_errors(_unique(problems), source)
    assert playbook is not None
    playbook._warnings = [p for p in problems if p.severity == "warning"]
    playbook._coverage = coverage
    if fmt == "simple":
        steps = doc["playbook"]
        playbook._gate_defaulted = [f"main.{step.get('id')}" for step in steps[:-1]
                                    if isinstance(step, dict) and "gate" not in step]
    return playbook


def _reported_by_the_format(problem: Problem) -> bool:
    """Refs and ids the simple and flow lowerings check themselves (with the author's names)."""
    lowered = problem.path.startswith(("journeys.", "interrupts", "initial"))
    if lowered and problem.message.startswith("unknown checkpoint"):
        return True
    return problem.path.startswith("journeys.main.checkpoints") and ": duplicate id " in problem.message


def build_playbook(
    model: type[Playbook],
    doc: dict[str, Any], source: str | None = None, extra_warnings: list[Problem] | None = None,
    *, strict: bool = False,
) -> Playbook:
    """Validate a full-format document, run every check and compile; raise on any error."""
    playbook, problems = check_document(model, doc)
    problems = _strict([*(extra_warnings or []), *problems], strict)
    _raise_errors(problems, source)
    assert playbook is not None
    playbook._warnings = [p for p in problems if p.severity == "warning"]
    return playbook


def check_document(
    model: type[Playbook], doc: dict[str, Any]
) -> tuple[Playbook | None, list[Problem]]:
    """Every problem of a full-format document (errors first) and the playbook, or None.

    When pydantic refuses the document, its problems are reported and the checks still run
    on a best-effort repair of it (see ``problems.validate_best_effort``): their errors come
    with the author's paths, except those the repair itself caused.
    """
    # Validation compiles templates (jinja2): imported with the first load, not with Playbook.
    from .validate import validate_playbook

    try:
        playbook = model.model_validate(doc)
    except ValidationError as exc:
        repaired, problems, repair = validate_best_effort(model, doc, exc)
        if repaired is not None:
            for problem in validate_playbook(repaired):
                if problem.severity != "error" and not problem.strict:
                    continue  # graph warnings about a repaired playbook would mislead
                problem = repair.original(problem)
                if not repair.is_follow_on(problem):
                    problems.append(problem)
        return None, _unique(problems)
    return playbook, validate_playbook(playbook)


def _unique(problems: list[Problem]) -> list[Problem]:
    """Errors first, then warnings; each (path, message) once."""
    seen: set[tuple[str, str, str]] = set()
    out: list[Problem] = []
    for problem in [*(p for p in problems if p.severity == "error"),
                    *(p for p in problems if p.severity != "error")]:
        key = (problem.path, problem.message, problem.severity)
        if key not in seen:
            seen.add(key)
            out.append(problem)
    return out


def _strict(problems: list[Problem], strict: bool) -> list[Problem]:
    """Under ``strict``, the warnings marked ``strict`` are errors; errors first again."""
    if not strict:
        return problems
    out = [dataclasses.replace(p, severity="error") if p.strict else p for p in problems]
    return [*(p for p in out if p.severity == "error"), *(p for p in out if p.severity != "error")]


def _yaml11_keys(doc: dict[str, Any], source: str | None) -> dict[str, Any]:
    """A document parsed by a YAML 1.1 reader (``yaml.safe_load``) loads like the file.

    Such a reader turns the keys ``on``/``off``/``yes``/``no`` into booleans. In pipeline
    steps and handlers the key ``True`` is read as ``on``; a boolean key anywhere else is an
    error that names the cause and the fix (it could have been any of those words)."""
    problems: list[Problem] = []

    def fix_on(item: Any) -> Any:
        if isinstance(item, dict) and True in item and "on" not in item:
            return {("on" if k is True else k): v for k, v in item.items()}
        return item

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key, child in value.items():
                if isinstance(key, bool):
                    problems.append(Problem(
                        join_path(path, str(key)) if path else str(key),
                        f"key {key!r} is a boolean: a YAML 1.1 reader (yaml.safe_load) reads "
                        "the keys on/off/yes/no as booleans",
                        "load the file with Playbook.load (YAML 1.2) or quote the key, e.g. 'on':"))
                else:
                    walk(child, join_path(path, key) if path else str(key))
        elif isinstance(value, list):
            for index, child in enumerate(value):
                walk(child, join_path(path, index))

    if not _has_bool_key(doc):
        return doc
    doc = dict(doc)
    pipelines = doc.get("pipelines")
    if isinstance(pipelines, list):
        doc["pipelines"] = [
            {**p, "steps": [fix_on(s) for s in p["steps"]]} if isinstance(p, dict) and isinstance(p.get("steps"), list) else p
            for p in pipelines
        ]
    if isinstance(doc.get("handlers"), list):
        doc["handlers"] = [fix_on(h) for h in doc["handlers"]]
    walk(doc, "")
    if problems:
        raise PlaybookError(problems, source)
    return doc


def _has_bool_key(value: Any) -> bool:
    if isinstance(value, dict):
        return any(isinstance(k, bool) or _has_bool_key(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_bool_key(v) for v in value)
    return False


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
    "check_document",
    "detect_format",
    "dump_document",
    "dump_yaml",
    "load_document",
    "load_path",
    "load_text",
]
