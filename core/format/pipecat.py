"""pipecat-flows ``FlowConfig`` → full-format playbook (``superdialog-livekit convert``, SPEC §12).

The FlowConfig schema read here is the declarative one of pipecat-flows (``initial_node``;
``nodes`` as a mapping of name → node with ``task_messages``, ``role_message``, ``functions``,
``pre_actions``, ``post_actions``, ``context_strategy``, ``respond_immediately``;
``global_functions``; YAML with pipecat's ``!include`` relative to the file, or JSON), with
unknown keys refused everywhere except in actions, as pipecat does.
Everything lands in one journey ``main``, one checkpoint per node, and every choice that is not
exact is written into the report:

* a ``transition_only`` function → an llm advance rule (its ``description`` is the rule's
  ``when``); as a global function → an interrupt;
* any other function runs code: it becomes a python tool (id = the function's name, its result
  stored as ``results.<name>``) in a pipeline owned by a step ``<node>__<name>`` that the
  node's llm rule leads to; the pipeline's outcomes follow ``transition_to``: a node name, a
  ``Branch`` (one ``judge: expr`` rule per case on ``results.<name>.data.<field>``, with
  pipecat's case-key normalisation, then ``default``; no default, a failed call or no
  ``transition_to`` at all go back to the node, as pipecat stays there);
* parameters come from the signatures of ``handlers`` (name → callable, e.g. the functions of
  a ``--handlers`` module): slots of the node's checkpoint, the required ones in the rule's
  ``requires``, the docstring's summary as ``when`` and its ``Args:`` lines as descriptions;
  without a handler the rule carries no slots and the report says so;
* ``tts_say`` in ``pre_actions`` → the checkpoint's verbatim line; ``end_conversation``
  (pre or post) → a terminal checkpoint (its ``text`` spoken verbatim); ``function`` actions
  → python tools in the node's entry pipeline;
* ``role_message`` of the initial node → ``persona``; ``task_messages`` → ``goal``;
  ``{{ key }}`` templates → ``{{ slots.key }}`` where ``key`` is a parameter (a slot).
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import PlaybookError, Problem
from .yaml12 import Yaml12Loader, dump_yaml_text

JOURNEY = "main"


# --- the FlowConfig schema ------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FlowMessage(_Strict):
    role: str
    content: str


class FlowBranch(_Strict):
    field: str
    cases: dict[str, str] = Field(min_length=1)
    default: str | None = None

    def targets(self) -> list[str]:
        return [*self.cases.values(), *([self.default] if self.default else [])]


class FlowFunction(_Strict):
    name: str
    description: str | None = None
    transition_only: bool = False
    transition_to: str | FlowBranch | None = None

    def targets(self) -> list[str]:
        if self.transition_to is None:
            return []
        if isinstance(self.transition_to, str):
            return [self.transition_to]
        return self.transition_to.targets()


class FlowAction(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    handler: str | None = None
    text: str | None = None


class FlowNode(_Strict):
    task_messages: list[FlowMessage]
    role_message: str | None = None
    functions: list[FlowFunction] = Field(default_factory=list)
    pre_actions: list[FlowAction] = Field(default_factory=list)
    post_actions: list[FlowAction] = Field(default_factory=list)
    context_strategy: Literal["append", "reset"] | None = None
    respond_immediately: bool = True


class FlowConfig(_Strict):
    initial_node: str
    nodes: dict[str, FlowNode] = Field(min_length=1)
    global_functions: list[FlowFunction] = Field(default_factory=list)


# --- reading --------------------------------------------------------------------------------


def _case_keys(doc: Any) -> Any:
    """Branch case keys as pipecat's ``case_key`` reads them: booleans and any spelling of
    true/false become ``true``/``false``, everything else ``str()``."""
    if isinstance(doc, dict):
        out = {}
        for key, value in doc.items():
            if key == "cases" and isinstance(value, dict):
                value = {_case_key(k): v for k, v in value.items()}
            out[key] = _case_keys(value)
        return out
    if isinstance(doc, list):
        return [_case_keys(item) for item in doc]
    return doc


def _case_key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    text = str(key)
    return text.lower() if text.lower() in ("true", "false") else text


class _IncludeError(Exception):
    def __init__(self, problem: Problem) -> None:
        self.problem = problem


MAX_INCLUDE_DEPTH = 8


def _include_loader(base: Path, depth: int = 0) -> type[Yaml12Loader]:
    """A YAML 1.2 loader with pipecat's ``!include <path>`` (relative to ``base``)."""

    class IncludeLoader(Yaml12Loader):
        pass

    def include(loader: Yaml12Loader, node: yaml.Node) -> Any:
        name = str(loader.construct_scalar(node))  # type: ignore[arg-type]
        path = base / name
        where = f"!include {name}"
        if depth >= MAX_INCLUDE_DEPTH:
            raise _IncludeError(Problem(where, f"includes nest deeper than {MAX_INCLUDE_DEPTH}",
                                        "check for a file that includes itself"))
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise _IncludeError(Problem(where, f"cannot read {path}: {exc}")) from exc
        try:
            if path.suffix.lower() == ".json":
                return json.loads(text)
            return yaml.load(text, Loader=_include_loader(path.parent, depth + 1))  # Yaml12Loader is a SafeLoader
        except (json.JSONDecodeError, yaml.YAMLError) as exc:
            raise _IncludeError(Problem(where, f"{path} does not parse: {exc}")) from exc

    IncludeLoader.add_constructor("!include", include)
    return IncludeLoader


def read_flow_file(path: str | Path) -> Any:
    """Parse a FlowConfig (or any document) from ``.json``, else YAML (1.2 scalars, with
    pipecat's ``!include`` relative to the file)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlaybookError([Problem("", f"file not found: {file}", "check the path")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlaybookError([Problem("", f"cannot read {file}: {exc}")]) from exc
    is_json = file.suffix.lower() == ".json" or (
        file.suffix.lower() not in (".yaml", ".yml") and text.lstrip().startswith("{"))
    try:
        if is_json:
            return json.loads(text)
        return yaml.load(text, Loader=_include_loader(file.parent))  # Yaml12Loader is a SafeLoader
    except _IncludeError as exc:
        raise PlaybookError([exc.problem], str(file)) from None
    except json.JSONDecodeError as exc:
        raise PlaybookError([Problem("", f"not valid JSON: {exc}")], str(file)) from exc
    except yaml.YAMLError as exc:
        raise PlaybookError([Problem("", f"not valid YAML: {exc}")], str(file)) from exc


def is_flow_config(doc: Any) -> bool:
    """``initial_node`` and ``nodes`` as a mapping: a pipecat FlowConfig (a list: legacy flow)."""
    return isinstance(doc, dict) and "initial_node" in doc and isinstance(doc.get("nodes"), dict)


def _pydantic_problems(exc: ValidationError) -> list[Problem]:
    problems = []
    for error in exc.errors():
        parts: list[str] = []
        for loc in error["loc"]:
            if isinstance(loc, int):
                parts[-1:] = [f"{parts[-1]}[{loc}]" if parts else f"[{loc}]"]
            elif loc in ("str", "FlowBranch", "function-after[FlowBranch]"):
                continue  # the union member pydantic tried, not a key of the document
            else:
                parts.append(str(loc))
        path = ".".join(parts)
        kind = error["type"]
        if kind == "extra_forbidden":
            message, hint = "unknown key", "FlowConfig refuses keys it does not define"
        elif kind == "missing":
            message, hint = "is required", None
        else:
            message, hint = error["msg"], None
        problems.append(Problem(path, message, hint))
    # A union error is reported once per member; keep each (path, message) once.
    seen: set[tuple[str, str]] = set()
    return [p for p in problems if (p.path, p.message) not in seen and not seen.add((p.path, p.message))]


def parse_flow_config(doc: Any, source: str | None = None) -> FlowConfig:
    """Validate a FlowConfig document; ``PlaybookError`` listing every problem."""
    try:
        flow = FlowConfig.model_validate(_case_keys(doc))
    except ValidationError as exc:
        raise PlaybookError(_pydantic_problems(exc), source) from None
    problems: list[Problem] = []
    if flow.initial_node not in flow.nodes:
        problems.append(Problem("initial_node", f"{flow.initial_node!r} is not a node",
                                f"nodes: {', '.join(flow.nodes)}"))
    global_names = [f.name for f in flow.global_functions]
    problems += _unique(global_names, "global_functions")
    for index, func in enumerate(flow.global_functions):
        problems += _check_function(func, f"global_functions[{index}]", flow)
    for name, node in flow.nodes.items():
        problems += _unique([f.name for f in node.functions], f"nodes.{name}.functions")
        for index, func in enumerate(node.functions):
            path = f"nodes.{name}.functions[{index}]"
            if func.name in global_names:
                problems.append(Problem(path, f"function {func.name!r} is also a global function",
                                        "rename one of them"))
            problems += _check_function(func, path, flow)
        for where in ("pre_actions", "post_actions"):
            for index, action in enumerate(getattr(node, where)):
                path = f"nodes.{name}.{where}[{index}]"
                if action.type == "function" and not action.handler:
                    problems.append(Problem(path, "a 'function' action needs a 'handler' name"))
    if problems:
        raise PlaybookError(problems, source)
    return flow


def _unique(names: list[str], path: str) -> list[Problem]:
    seen: set[str] = set()
    out = []
    for name in names:
        if name in seen:
            out.append(Problem(path, f"function {name!r} is listed twice", "keep one"))
        seen.add(name)
    return out


def _check_function(func: FlowFunction, path: str, flow: FlowConfig) -> list[Problem]:
    problems = []
    for target in func.targets():
        if target not in flow.nodes:
            problems.append(Problem(f"{path}.transition_to", f"unknown node {target!r}",
                                    f"nodes: {', '.join(flow.nodes)}"))
    if func.transition_only:
        if not func.description:
            problems.append(Problem(f"{path}.description", "a transition_only function needs a "
                                    "description (it has no code whose docstring could say it)"))
        if not isinstance(func.transition_to, str):
            problems.append(Problem(f"{path}.transition_to", "a transition_only function needs "
                                    "one node name to go to"))
    return problems


# --- handler signatures ---------------------------------------------------------------------


_SKIP_PARAMS = frozenset({"self", "flow_manager", "flow", "args"})
_SIMPLE_TYPES: dict[Any, str] = {
    str: "str", int: "int", float: "float", bool: "bool", list: "array", dict: "object",
    date: "date", time: "time", datetime: "datetime",
}
_TYPE_NAMES = {"str": "str", "int": "int", "float": "float", "bool": "bool", "list": "array",
               "dict": "object", "date": "date", "time": "time", "datetime": "datetime"}


@dataclass
class HandlerInfo:
    """What a handler's signature and docstring say: its summary and its parameters as slots."""

    summary: str
    slots: dict[str, dict[str, Any]] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _docstring_parts(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    doc = inspect.getdoc(fn) or ""
    summary = doc.split("\n\n", 1)[0].strip()
    if re.match(r"^(Args|Arguments|Parameters|Returns):", summary):
        summary = ""
    args: dict[str, str] = {}
    match = re.search(r"^(?:Args|Arguments|Parameters):\s*\n((?:[ \t]+.*\n?)+)", doc, re.MULTILINE)
    if match:
        current = None
        for line in match.group(1).splitlines():
            item = re.match(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", line)
            if item:
                current = item.group(1)
                args[current] = item.group(2).strip()
            elif current and line.strip():
                args[current] = f"{args[current]} {line.strip()}".strip()
    return " ".join(summary.split()), args


def _slot_type(annotation: Any) -> tuple[dict[str, Any], bool, str | None]:
    """(slot spec fields, optional?, note) for a parameter annotation."""
    if annotation is inspect.Parameter.empty:
        return {"type": "str"}, False, "no annotation: a str slot"
    if isinstance(annotation, str):
        text = annotation.replace(" ", "")
        optional = text.startswith("Optional[") or "|None" in text or "None|" in text
        base = re.sub(r"^Optional\[(.*)\]$", r"\1", text).replace("|None", "").replace("None|", "")
        kind = _TYPE_NAMES.get(base.split("[", 1)[0].lower())
        if kind is None:
            return {"type": "str"}, optional, f"annotation {annotation!r} read as a str slot"
        return {"type": kind}, optional, None
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        rest = [a for a in args if a is not type(None)]
        optional = len(rest) < len(args)
        if len(rest) == 1:
            spec, _opt, note = _slot_type(rest[0])
            return spec, optional, note
        return {"type": "str"}, optional, f"union {annotation!r} read as a str slot"
    if origin is Literal:
        values = list(args)
        if all(isinstance(v, str) for v in values):
            return {"type": "enum", "values": values}, False, None
        return {"type": "str"}, False, f"Literal{values!r} of non-strings read as a str slot"
    if origin is not None:
        kind = _SIMPLE_TYPES.get(origin)
        if kind is not None:
            return {"type": kind}, False, None
    kind = _SIMPLE_TYPES.get(annotation)
    if kind is None:
        return {"type": "str"}, False, f"type {getattr(annotation, '__name__', annotation)!r} read as a str slot"
    return {"type": kind}, False, None


def handler_info(fn: Callable[..., Any]) -> HandlerInfo:
    """The slots a pipecat direct function's parameters ask for (``flow_manager`` skipped)."""
    summary, arg_docs = _docstring_parts(fn)
    info = HandlerInfo(summary=summary)
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        info.notes.append(f"cannot read its signature ({exc}); no slots")
        return info
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # forward references to pipecat types that are not importable here
        hints = {}
    for name, param in sig.parameters.items():
        if name in _SKIP_PARAMS or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = hints.get(name, param.annotation)
        if "FlowManager" in str(annotation):
            continue
        spec, optional, note = _slot_type(annotation)
        if arg_docs.get(name):
            spec["description"] = arg_docs[name]
        required = param.default is inspect.Parameter.empty and not optional
        if required:
            spec["required"] = True
            info.required.append(name)
        info.slots[name] = spec
        if note:
            info.notes.append(f"parameter {name}: {note}")
    return info


# --- converting -----------------------------------------------------------------------------


@dataclass
class Conversion:
    """The playbook document, its YAML, and what did not map (``report``, one line each)."""

    document: dict[str, Any]
    report: list[Problem]

    def to_yaml(self) -> str:
        return dump_yaml_text(self.document)


_ID = re.compile(r"[^A-Za-z0-9_]+")


def _cp_id(name: str) -> str:
    ident = _ID.sub("_", name).strip("_") or "node"
    return ident if not ident[0].isdigit() else f"n_{ident}"


_TEMPLATE = re.compile(r"(\\)?\{\{\s*([^{}]*?)\s*\}\}")
_JINJA_OPEN = re.compile(r"\{[{%#]")


def _literal(text: str) -> str:
    """``text`` as it reads in a Jinja template (a string literal where it holds Jinja syntax)."""
    if _JINJA_OPEN.search(text) or text.endswith("{"):  # "{" + "{{ x }}" would read "{{{"
        return "{{ " + json.dumps(text, ensure_ascii=False) + " }}"
    return text


class _Converter:
    def __init__(self, flow: FlowConfig, handlers: Mapping[str, Callable[..., Any]] | None,
                 name: str) -> None:
        self.flow = flow
        self.handlers = handlers
        self.name = name
        self.report: list[Problem] = []
        self.ids = {node: _cp_id(node) for node in flow.nodes}
        self._dedupe_ids()
        self.checkpoints: list[dict[str, Any]] = []
        self.tools: dict[str, dict[str, Any]] = {}
        self.pipelines: list[dict[str, Any]] = []
        self.interrupts: list[dict[str, Any]] = []
        self.slots: set[str] = set()
        self.persona = ""
        self._infos: dict[str, HandlerInfo | None] = {}

    def _dedupe_ids(self) -> None:
        seen: dict[str, int] = {}
        for node, ident in list(self.ids.items()):
            if ident in seen:
                seen[ident] += 1
                self.ids[node] = f"{ident}_{seen[ident]}"
            else:
                seen[ident] = 1
            if self.ids[node] != node:
                self.note(f"nodes.{node}", f"checkpoint id {self.ids[node]!r}",
                          "checkpoint ids are letters, digits and underscores")

    def ref(self, node: str) -> str:
        return f"{JOURNEY}.{self.ids[node]}"

    def note(self, path: str, message: str, hint: str | None = None) -> None:
        self.report.append(Problem(path, message, hint, severity="warning"))

    # --- helpers ------------------------------------------------------------------------

    def info(self, func: FlowFunction, path: str) -> HandlerInfo | None:
        if func.name in self._infos:
            return self._infos[func.name]
        fn = (self.handlers or {}).get(func.name)
        info = handler_info(fn) if fn is not None else None
        if info is None:
            why = "no --handlers module given" if self.handlers is None else \
                "the --handlers module has no function of that name"
            self.note(path, f"function {func.name!r}: {why}, so its rule carries no slots",
                      "pass --handlers <module> to read the parameters from its signature")
        else:
            for line in info.notes:
                self.note(path, f"function {func.name!r}: {line}")
        self._infos[func.name] = info
        return info

    def text(self, raw: str, path: str, *, template: bool) -> str:
        """pipecat ``{{ key }}`` → ``{{ slots.key }}`` (template) or the bare name (plain)."""

        def swap(match: re.Match[str]) -> str:
            if match.group(1):  # \{{ key }}: a literal in pipecat
                literal = match.group(0)[1:]
                return "{{ " + json.dumps(literal) + " }}" if template else literal
            expr = match.group(2)
            head = expr.split(".", 1)[0]
            if template and head in self.slots and re.fullmatch(r"[\w.]+", expr):
                return "{{ slots." + expr + " }}"
            if template or head not in self.slots:
                self.note(path, f"{{{{ {expr} }}}} reads pipecat flow state, which has no "
                          f"counterpart here; written as {expr}",
                          "declare a slot of that name, or write the value into the text")
            return expr

        if not template:
            return _TEMPLATE.sub(swap, raw)
        # pipecat fills only {{ key }}: any other Jinja syntax between them ({%, {#, an
        # unclosed {{) is plain text there, so it goes into the template as a string literal.
        out: list[str] = []
        at = 0
        for match in _TEMPLATE.finditer(raw):
            out.append(_literal(raw[at:match.start()]))
            out.append(swap(match))
            at = match.end()
        out.append(_literal(raw[at:]))
        return "".join(out)

    def tool(self, tool_id: str, path: str, *, stores: bool) -> None:
        spec = self.tools.setdefault(tool_id, {"id": tool_id, "type": "python"})
        if stores:
            spec["store_response_as"] = tool_id

    # --- nodes --------------------------------------------------------------------------

    def convert(self) -> dict[str, Any]:
        flow = self.flow
        # Slot names first: templates anywhere may read a parameter declared at a later node.
        for node in flow.nodes.values():
            for func in node.functions:
                fn = (self.handlers or {}).get(func.name)
                if fn is not None and not func.transition_only:
                    self.slots.update(handler_info(fn).slots)
        initial = flow.nodes[flow.initial_node]
        self.persona = (initial.role_message or next(
            (n.role_message for n in flow.nodes.values() if n.role_message), "") or "").strip()
        order = [flow.initial_node, *[n for n in flow.nodes if n != flow.initial_node]]
        for name in order:
            self.node(name, flow.nodes[name])
        for index, func in enumerate(flow.global_functions):
            self.global_function(func, f"global_functions[{index}]")
        doc: dict[str, Any] = {"name": self.name}
        if self.persona:
            doc["persona"] = self.text(self.persona, f"nodes.{flow.initial_node}.role_message",
                                       template=False)
        doc["initial"] = self.ref(flow.initial_node)
        doc["journeys"] = {JOURNEY: {"checkpoints": self.checkpoints}}
        if self.tools:
            doc["tools"] = list(self.tools.values())
            names = ", ".join(sorted(self.tools))
            self.note("tools", f"python tools to register: {names}",
                      "pass them as python_tools= (or in <playbook>_tools.py, or --tools); each "
                      "is called as fn(args, state), reads the slots from state.slots and "
                      "returns a mapping (pipecat's (result, next_node) tuple is not used)")
        if self.pipelines:
            doc["pipelines"] = self.pipelines
        if self.interrupts:
            doc["interrupts"] = self.interrupts
        return doc

    def node(self, name: str, node: FlowNode) -> None:
        path = f"nodes.{name}"
        cp: dict[str, Any] = {"id": self.ids[name]}
        task = "\n".join(m.content.strip() for m in node.task_messages if m.content.strip())
        goal = self.text(task, f"{path}.task_messages", template=False)
        if goal:
            cp["goal"] = goal
        guidance = []
        if node.role_message and node.role_message.strip() != self.persona:
            guidance.append(self.text(node.role_message.strip(), f"{path}.role_message",
                                      template=True))
            self.note(f"{path}.role_message", "differs from the persona (the initial node's role "
                      "message); kept at the start of this checkpoint's guidance")
        if "{{" in task:  # the goal is plain text; the guidance template fills the values in
            guidance.append(self.text(task, f"{path}.task_messages", template=True))
        if guidance:
            cp["guidance"] = "\n".join(guidance)
        if node.context_strategy:
            cp["context"] = node.context_strategy
        if not node.respond_immediately:
            self.note(f"{path}.respond_immediately", "false is not mapped: a checkpoint speaks "
                      "when it is entered", "start the call silently (start(speak=False)) for an "
                      "outbound call that waits for the callee")
        verbatim: list[str] = []
        entry_tools: list[str] = []
        terminal = False
        for where in ("pre_actions", "post_actions"):
            for index, action in enumerate(getattr(node, where)):
                terminal |= self.action(action, f"{path}.{where}[{index}]", where, verbatim,
                                        entry_tools)
        if verbatim:
            cp["say_verbatim"] = " ".join(verbatim)
        if entry_tools:
            pipeline_id = f"{self.ids[name]}__enter"
            self.pipelines.append({"id": pipeline_id, "steps": [
                {"tool": tool_id, "on": {"failed": "continue"}} for tool_id in entry_tools]})
            cp["pipeline"] = pipeline_id
        if terminal:
            cp["terminal"] = True
            cp["outcome"] = self.ids[name]
            for index, func in enumerate(node.functions):
                self.note(f"{path}.functions[{index}]", f"function {func.name!r} dropped: the node "
                          "ends the conversation, and a terminal checkpoint has no rules")
            self.checkpoints.append(cp)
            return
        rules: list[dict[str, Any]] = []
        slots: dict[str, dict[str, Any]] = {}
        self.checkpoints.append(cp)
        for index, func in enumerate(node.functions):
            self.function(name, func, f"{path}.functions[{index}]", rules, slots)
        if slots:
            cp["slots"] = slots
        if rules:
            cp["advance_when"] = rules

    def action(self, action: FlowAction, path: str, where: str, verbatim: list[str],
               entry_tools: list[str]) -> bool:
        """Map one action; True when it ends the conversation."""
        extras = set(action.model_extra or {}) - {"append_text_to_context"}
        if action.type == "tts_say":
            if not action.text:
                self.note(path, "tts_say without text: nothing to say")
            elif where == "pre_actions":
                verbatim.append(self.text(action.text, path, template=True))
            else:
                self.note(path, "tts_say in post_actions is not mapped (it is spoken after the "
                          "node's first reply)", "move it into pre_actions, or into the task")
            return False
        if action.type == "end_conversation":
            if action.text:
                verbatim.append(self.text(action.text, path, template=True))
            return True
        if action.type == "function":
            assert action.handler is not None
            entry_tools.append(action.handler)
            self.tool(action.handler, path, stores=False)
            if where == "post_actions":
                self.note(path, f"function action {action.handler!r} runs when the checkpoint "
                          "is entered (before its reply, not after)")
            if extras:
                self.note(path, f"keys {', '.join(sorted(extras))} are not passed to the tool")
            return False
        self.note(path, f"action type {action.type!r} is not mapped (custom actions are "
                  "registered in pipecat code)", "write it as a python tool in a pipeline")
        return False

    def function(self, node: str, func: FlowFunction, path: str, rules: list[dict[str, Any]],
                 slots: dict[str, dict[str, Any]]) -> None:
        if func.transition_only:
            assert isinstance(func.transition_to, str) and func.description
            rules.append({"when": " ".join(func.description.split()),
                          "to": self.ref(func.transition_to)})
            return
        info = self.info(func, path)
        when = " ".join((func.description or (info.summary if info else "") or "").split())
        if not when:
            when = f"The caller wants to {func.name.replace('_', ' ')}."
            self.note(path, f"function {func.name!r} has no description; its rule reads {when!r}",
                      "write the docstring of the handler, or edit the rule's when")
        rule: dict[str, Any] = {"when": when}
        if info is not None:
            for key, spec in info.slots.items():
                slots.setdefault(key, dict(spec))
            if info.required:
                rule["requires"] = list(info.required)
        step = self.step(node, func, path, back=self.ref(node))
        rule["to"] = f"{JOURNEY}.{step}"
        rules.append(rule)

    def step(self, origin: str | None, func: FlowFunction, path: str, *, back: str | None) -> str:
        """The pipeline-owned checkpoint that runs ``func`` and routes by its outcome."""
        base = f"{self.ids[origin]}__{_cp_id(func.name)}" if origin else f"{_cp_id(func.name)}__global"
        step_id = base
        taken = {cp["id"] for cp in self.checkpoints} | set(self.ids.values())
        n = 1
        while step_id in taken:
            n += 1
            step_id = f"{base}_{n}"
        pipeline_id = f"{step_id}__run"
        target = func.transition_to
        self.tool(func.name, path, stores=isinstance(target, FlowBranch))
        on: dict[str, str] = {}
        cp: dict[str, Any] = {"id": step_id, "goal": f"Run {func.name} and move on by its result.",
                              "pipeline": pipeline_id}
        rules: list[dict[str, Any]] = []
        if isinstance(target, str):
            on["ok"] = self.ref(target)
        elif isinstance(target, FlowBranch):
            value = self.result_path(func.name, target.field, path)
            for case, node in target.cases.items():
                rules.append({"when": f"{value} in {_case_values(case)}", "judge": "expr",
                              "to": self.ref(node)})
            if target.default:
                rules.append({"when": "pipeline.ok", "judge": "expr", "to": self.ref(target.default)})
            elif back:
                rules.append({"when": "pipeline.ok", "judge": "expr", "to": back})
            else:
                self.note(f"{path}.transition_to", "no default: an unmatched result stays at the "
                          f"step {step_id} (a global function has no node to go back to)")
        elif back:
            on["ok"] = back
            self.note(path, f"function {func.name!r} stays on its node: after the tool the call "
                      "re-enters the node")
        if back:
            on["failed"] = back
        else:
            self.note(path, f"a failed {func.name!r} call stays at the step {step_id}")
        if on:
            step: dict[str, Any] = {"tool": func.name, "on": on}
        else:
            step = {"tool": func.name}
        self.pipelines.append({"id": pipeline_id, "steps": [step]})
        if rules:
            cp["advance_when"] = rules
        self.checkpoints.append(cp)
        return step_id

    def result_path(self, tool: str, field_name: str, path: str) -> str:
        if re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", field_name):
            return f"results.{tool}.data.{field_name}"
        self.note(f"{path}.transition_to.field", f"field {field_name!r} is not a plain name; "
                  "read with an index")
        return f"results.{tool}.data[{json.dumps(field_name)}]"

    def global_function(self, func: FlowFunction, path: str) -> None:
        ident = _cp_id(func.name)
        if func.transition_only:
            assert isinstance(func.transition_to, str) and func.description
            self.interrupts.append({"id": ident, "when": " ".join(func.description.split()),
                                    "to": self.ref(func.transition_to)})
            return
        if func.transition_to is None:
            self.note(path, f"global function {func.name!r} runs code and stays on the node; "
                      "not mapped (the Director cannot call a tool and return to any step)",
                      "offer it at the nodes that need it")
            return
        info = self.info(func, path)
        when = " ".join((func.description or (info.summary if info else "") or "").split()) \
            or f"The caller wants to {func.name.replace('_', ' ')}."
        if info is not None and info.slots:
            self.note(path, f"global function {func.name!r}: parameters "
                      f"{', '.join(info.slots)} are not collected (an interrupt has no slots)")
        step = self.step(None, func, path, back=None)
        self.interrupts.append({"id": ident, "when": when, "to": f"{JOURNEY}.{step}"})


def _case_values(case: str) -> str:
    """The values a case key matches after pipecat's normalisation, as an expression list."""
    if case in ("true", "false"):
        word = case
        values: list[Any] = [case == "true", word, word.capitalize(), word.upper()]
    else:
        values = [case]
        if re.fullmatch(r"-?\d+", case):
            values.append(int(case))
        elif re.fullmatch(r"-?\d+\.\d+", case):
            values.append(float(case))
    return "[" + ", ".join(repr(v) if not isinstance(v, str) else json.dumps(v) for v in values) + "]"


def convert_flow_config(doc: Any, *, handlers: Mapping[str, Callable[..., Any]] | None = None,
                        name: str = "", source: str | None = None) -> Conversion:
    """A FlowConfig document → the full-format document and the report of what did not map."""
    flow = parse_flow_config(doc, source)
    converter = _Converter(flow, handlers, name or "converted")
    document = converter.convert()
    seen: set[Problem] = set()
    report = [p for p in converter.report if not (p in seen or seen.add(p))]
    return Conversion(document=document, report=report)


__all__ = [
    "Conversion",
    "FlowConfig",
    "HandlerInfo",
    "convert_flow_config",
    "handler_info",
    "is_flow_config",
    "parse_flow_config",
    "read_flow_file",
]
