"""Legacy flow JSON (``initial_node`` + a ``nodes`` list) compiled into one ``main`` journey.

The accepted shape is documented (with an example) in ``flow_schema.py``. Mapping, after
reference/superdialog-engine.md §1.15:

* A node that speaks (``instruction``/``static_text``/``is_final``) → a soft checkpoint: goal =
  name, guidance = instruction, say_verbatim = static_text, terminal = is_final with outcome =
  node id, turn_budget = max_turns, slots = the union of its edges' ``input_schema`` properties
  (optional), on_enter actions → ``on_enter`` tools.
* An edge → an advance rule; ``required`` → ``requires``. Conditions of the single-clause forms
  ``X.success == true|false`` (also ``=``/``is``), ``not X.success`` and ``X.status == NNN``
  over a known ``store_response_as`` (a trailing " — gloss" is tolerated) become expr rules;
  any other condition stays an llm rule with the prose verbatim.
* A node that does not speak and has no actions is folded into its sources' rules.
* A chain of non-speaking nodes with actions becomes a pipeline (one step per action; failure
  edges → ``failed``/``http_NNN`` routes) plus a synthetic soft checkpoint ``<src>__<edge>``
  with rules ``pipeline.ok`` → the landing node and ``pipeline.failed`` → the failure node or
  the source. An edge's own actions become such a checkpoint too (ok and failed both continue).
* Nodes whose every inbound edge matches "silence / no response / not respond" →
  ``policies.silence`` (prompt nodes give the prompts; a final one is the ``then``).
* A global edge mentioning 401 or a token whose target runs a refresh action → ``middleware``;
  other global edges → llm interrupts (``kind: goodbye`` when the id or condition says goodbye).
* Nodes nobody enters whose instruction names a webhook or timer → handlers with a pipeline of
  their actions. ``actions`` → tools 1:1.
* Bare template names → ``env.X`` / ``results.X`` / ``slots.X`` / ``clock.*`` / call-start
  values, at the identifier level (``flow_text``). The persona is kept verbatim (never rendered).
* ``agent_language`` / ``agent_tone`` / ``agent_gender`` → ``guidelines``; the keys this engine
  does not act on yet (``flow_schema.inert_keys``) are named in one warning.

``compile_flow`` returns the full document, the problems (unknown keys, duplicate ids, unknown
targets) and the coverage report: one ``CoverageEntry`` per node, edge and action saying what it
became (``Playbook.coverage_gaps`` lists those that did not fully map).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import Problem
from . import flow_names
from .flow_paths import J, flow_author_path
from .flow_schema import ALIASES, ConversationFlow, FlowAction, FlowEdge, FlowNode, inert_keys
from .flow_text import Coverage, CoverageEntry, FlowText, slot_spec
from .problems import hint_for, join_path, validate_best_effort

_SILENCE = re.compile(r"silence|no response|not respond", re.IGNORECASE)
_GOODBYE = re.compile(r"\b(good\s?bye|bye|end (the|this) call|hang up)\b", re.IGNORECASE)
_REFRESH = re.compile(r"\b401\b|token", re.IGNORECASE)
_HANDLER = re.compile(r"\b(webhook|timer)\b(?:[\s.:_-]+([A-Za-z][A-Za-z0-9_]*))?", re.IGNORECASE)


def compile_flow(doc: dict[str, Any]) -> tuple[dict[str, Any], list[Problem], list[CoverageEntry]]:
    """``(full-format document, problems, coverage report)`` for a legacy flow document.

    With problems, the document is best-effort (unknown keys and bad values left out, edges to
    unknown nodes cut, unknown actions skipped) so the full format's checks can still run; it
    is empty when nothing could be compiled (no usable initial node).

    The compile is a pure function of the document, so the last few results are kept by the
    document's JSON text: a worker that loads the same flow for every call compiles it
    once. The returned full document is shared: read it, do not change it."""
    try:
        key = json.dumps(doc, separators=(",", ":"))  # key order matters: a reordered doc only misses
    except (TypeError, ValueError):  # not JSON data (from_dict with other values): no cache
        return _compile_flow(doc)
    hit = _CACHE.get(key)
    if hit is None:
        hit = _CACHE[key] = _compile_flow(doc)
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
    full, problems, coverage = hit
    return full, list(problems), list(coverage)


_CACHE: dict[str, tuple[dict[str, Any], list[Problem], list[CoverageEntry]]] = {}
_CACHE_SIZE = 16


def _compile_flow(doc: dict[str, Any]) -> tuple[dict[str, Any], list[Problem], list[CoverageEntry]]:
    # The aliases are renamed first, so a repair removes what is wrong at the key it validates.
    named = {ALIASES.get(k, k): v for k, v in doc.items() if not (k in ALIASES and ALIASES[k] in doc)}
    flow, problems, repair = validate_best_effort(ConversationFlow, named)
    problems = [_alias_path(doc, p) for p in problems]
    if flow is None:
        return {}, problems, []
    compiler = _FlowCompiler(flow)
    for problem in compiler.check():
        problem = repair.original(problem)
        if not repair.is_follow_on(problem):
            problems.append(problem)
    if not compiler.prune():
        return {}, problems, []
    full = compiler.compile()
    problems.extend(compiler.warnings(doc))
    errors = any(p.severity == "error" for p in problems)
    return full, problems, [] if errors else compiler.coverage.entries()


def _alias_path(doc: dict[str, Any], problem: Problem) -> Problem:
    """A problem under ``actions``/``environment_variables`` in the alias the author wrote."""
    for alias, key in ALIASES.items():
        if alias in doc and key not in doc and (problem.path == key or problem.path.startswith((key + ".", key + "["))):
            return Problem(alias + problem.path[len(key):], problem.message, problem.hint, problem.severity)
    return problem


def _template_texts(action: FlowAction) -> list[str]:
    texts = [action.url, *action.headers.values()]
    body = action.body_template
    stack = [body]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return texts


def _reads(texts: list[str]) -> set[str]:
    names: set[str] = set()
    for text in texts:
        names.update(flow_names.heads(text) or [])
    return names


class _FlowCompiler:
    def __init__(self, flow: ConversationFlow) -> None:
        self.flow = flow
        self.nodes = {n.id: n for n in flow.nodes}
        self.actions = {a.id: a for a in flow.actions}
        self.results = {a.store_response_as for a in flow.actions if a.store_response_as}
        self.slots: dict[str, dict[str, Any]] = {}
        for node in flow.nodes:
            for edge in node.edges:
                for key, prop in (edge.input_schema.properties if edge.input_schema else {}).items():
                    self.slots.setdefault(key, slot_spec(prop))
        self.coverage = Coverage()
        env_keys = set(flow.environment_variables) | {k for a in flow.actions for k in a.env_updates}
        tool_reads = _reads([t for a in flow.actions for t in _template_texts(a)])
        speech_reads = _reads([t for n in flow.nodes for t in (n.instruction, n.static_text) if t])
        # An env key only speech reads is per-call data (a name, a date of birth): a call-start
        # value with the flow's literal as its default. Read by tools as well, it stays env.
        self.speech_env = {k for k in env_keys & speech_reads - tool_reads if k not in self.slots}
        self.text = FlowText(env_keys, self.results, set(self.slots), self.coverage, self.speech_env)
        self.used_actions: set[str] = set()
        self.pipelines: dict[str, dict[str, Any]] = {}
        self.synthetic: list[dict[str, Any]] = []
        inbound: dict[str, list[FlowEdge]] = {n.id: [] for n in flow.nodes}
        for edge in [e for n in flow.nodes for e in n.edges] + list(flow.global_edges):
            if edge.target_node_id in inbound:
                inbound[edge.target_node_id].append(edge)
        self.inbound = inbound
        self.silent = {
            n.id for n in flow.nodes if inbound[n.id] and all(_SILENCE.search(e.condition) for e in inbound[n.id])
        }

    # --- problems ----------------------------------------------------------------------

    def check(self) -> list[Problem]:
        problems: list[Problem] = []
        ids = list(self.nodes)
        seen: set[str] = set()
        for index, node in enumerate(self.flow.nodes):
            if node.id in seen:
                problems.append(Problem(join_path("nodes", index, "id"), f"duplicate node id {node.id!r}"))
            seen.add(node.id)
            for e_index, edge in enumerate(node.edges):
                self._check_edge(edge, join_path("nodes", index, "edges", e_index), ids, problems)
            for a_index, trigger in enumerate(node.actions):
                self._check_action(trigger.action_id, join_path("nodes", index, "actions", a_index, "action_id"), problems)
        for e_index, edge in enumerate(self.flow.global_edges):
            self._check_edge(edge, join_path("global_edges", e_index), ids, problems)
        if self.flow.initial_node not in self.nodes:
            problems.append(Problem("initial_node", f"unknown node {self.flow.initial_node!r}",
                                    hint_for(self.flow.initial_node, ids)))
        elif not self.nodes[self.flow.initial_node].speaks:
            problems.append(Problem("initial_node", "the initial node must speak (instruction or static_text)"))
        return problems

    def _check_edge(self, edge: FlowEdge, path: str, ids: list[str], problems: list[Problem]) -> None:
        if edge.target_node_id is not None and edge.target_node_id not in self.nodes:
            problems.append(Problem(join_path(path, "target_node_id"), f"unknown node {edge.target_node_id!r}",
                                    hint_for(edge.target_node_id, ids)))
        for a_index, trigger in enumerate(edge.actions):
            self._check_action(trigger.action_id, join_path(path, "actions", a_index, "action_id"), problems)

    def _check_action(self, action_id: str, path: str, problems: list[Problem]) -> None:
        if action_id not in self.actions:
            problems.append(Problem(path, f"unknown action {action_id!r}", hint_for(action_id, list(self.actions))))

    def prune(self) -> bool:
        """Cut what ``check`` refused (edges to unknown nodes, unknown actions) so the rest can be
        compiled; False when there is no usable initial node."""
        initial = self.nodes.get(self.flow.initial_node)
        if initial is None or not initial.speaks:
            return False
        for edge in [e for n in self.flow.nodes for e in n.edges] + list(self.flow.global_edges):
            if edge.target_node_id is not None and edge.target_node_id not in self.nodes:
                edge.target_node_id = None
            edge.actions = [t for t in edge.actions if t.action_id in self.actions]
        for node in self.flow.nodes:
            node.actions = [t for t in node.actions if t.action_id in self.actions]
        return True

    # --- templates and conditions ------------------------------------------------------


    # --- coverage sources ----------------------------------------------------------------

    @staticmethod
    def node_src(node: FlowNode) -> str:
        return f"nodes.{node.id}"

    def edge_src(self, node: FlowNode | None, edge: FlowEdge, index: int) -> str:
        if node is None:
            return f"global_edges.{edge.id or index}"
        return f"nodes.{node.id}.edges.{edge.id or index}"

    # --- rules -------------------------------------------------------------------------

    def rules_for(self, node: FlowNode, edges: list[FlowEdge], owner: FlowNode, depth: int = 0) -> list[dict[str, Any]]:
        """The advance rules of ``owner`` for ``edges`` of ``node`` (a folded router's edges
        are ``owner``'s rules too)."""
        rules: list[dict[str, Any]] = []
        for index, edge in enumerate(edges):
            source = self.edge_src(node, edge, index)
            if edge.target_node_id is None:
                self.coverage.gap(source, "no target node")
                continue
            if node.id in self.silent or (_SILENCE.search(edge.condition) and edge.target_node_id in self.silent):
                self.coverage.became(source, "policies.silence")
                continue
            target = self.nodes[edge.target_node_id]
            judge, when = self.text.condition(edge.condition)
            rule: dict[str, Any] = {"when": when, "judge": judge}
            if edge.id and depth == 0:
                rule["id"] = edge.id  # the log then names the edge the author wrote
            if edge.requires():
                rule["requires"] = edge.requires()
            if edge.actions:
                rule["to"] = self.edge_actions(node, edge, index)
            elif target.speaks:
                rule["to"] = f"{J}.{target.id}"
            elif target.actions:
                rule["to"] = self.tool_chain(node, edge, index, target)
            elif depth < 8:
                self.coverage.became(self.node_src(target), f"folded into the rules of {J}.{owner.id}")
                folded = self.rules_for(target, target.edges, owner, depth + 1)
                if judge == "llm":
                    for sub in folded:
                        if sub["judge"] == "llm":
                            sub["when"] = f"{edge.condition} and {sub['when']}"
                self.coverage.became(source, f"combined with {target.id!r}'s rules in {J}.{owner.id}")
                rules.extend(folded)
                continue
            else:
                self.coverage.gap(source, "routing nodes nested too deeply (more than 8)")
                continue
            self.coverage.became(source, f"{judge} rule of {J}.{owner.id} → {rule['to']}")
            rules.append(rule)
        return rules

    def tool_chain(self, src: FlowNode, edge: FlowEdge, index: int, start: FlowNode) -> str:
        """A pipeline for the chain of action nodes from ``start``; returns the synthetic ref."""
        pipeline_id, landing, failure = start.id, None, None
        steps: list[dict[str, Any]] = []
        node: FlowNode | None = start
        visited: set[str] = set()
        while node is not None and not node.speaks and node.id not in visited:
            visited.add(node.id)
            self.coverage.became(self.node_src(node), f"steps of pipeline {pipeline_id}")
            on: dict[str, Any] = {}
            next_node: FlowNode | None = None
            for e_index, out in enumerate(node.edges):
                key = self.text.failure_key(out.condition)
                target = self.nodes.get(out.target_node_id or "")
                out_src = self.edge_src(node, out, e_index)
                if key and target is not None and target.speaks:
                    on[key] = f"{J}.{target.id}"
                    self.coverage.became(out_src, f"pipeline {pipeline_id} {key} → {on[key]}")
                    if key == "failed" or failure is None:
                        failure = on[key]
                elif target is not None and next_node is None:
                    next_node = target
                    self.coverage.became(out_src, f"pipeline {pipeline_id} continues at {target.id!r}")
                else:
                    self.coverage.gap(out_src, "a second success path out of an action node")
            for trigger in node.actions:
                self.used_actions.add(trigger.action_id)
                if trigger.trigger_type == "on_exit":
                    self.coverage.note(self.node_src(node), f"on_exit action {trigger.action_id!r} runs as a step")
                steps.append({"tool": trigger.action_id})
            if steps and on:
                steps[-1]["on"] = on
            node = next_node
        if node is not None and node.speaks:
            landing = f"{J}.{node.id}"
        else:
            self.coverage.gap(self.node_src(start), f"pipeline {pipeline_id!r}: no node that speaks after the "
                              f"actions; returns to {src.id!r}")
        self.pipelines.setdefault(pipeline_id, {"id": pipeline_id, "steps": steps})
        return self.synthetic_checkpoint(src, edge, index, pipeline_id, landing or f"{J}.{src.id}",
                                         failure or f"{J}.{src.id}")

    def edge_actions(self, src: FlowNode, edge: FlowEdge, index: int) -> str:
        pipeline_id = f"{src.id}__{edge.id or index}"
        self.used_actions.update(t.action_id for t in edge.actions)
        self.pipelines[pipeline_id] = {"id": pipeline_id, "steps": [{"tool": t.action_id} for t in edge.actions]}
        target = self.nodes[edge.target_node_id or ""]
        if not target.speaks:
            self.coverage.gap(self.edge_src(src, edge, index), "actions on an edge into a routing node")
        to = f"{J}.{target.id}"
        return self.synthetic_checkpoint(src, edge, index, pipeline_id, to, to)

    def synthetic_checkpoint(self, src: FlowNode, edge: FlowEdge, index: int, pipeline: str, ok: str, failed: str) -> str:
        cp_id = f"{src.id}__{edge.id or index}"
        self.synthetic.append({
            "id": cp_id, "goal": f"Run {pipeline}", "pipeline": pipeline,
            "advance_when": [
                {"when": "pipeline.ok", "judge": "expr", "to": ok},
                {"when": "pipeline.failed", "judge": "expr", "to": failed},
            ],
        })
        return f"{J}.{cp_id}"

    def checkpoint(self, node: FlowNode) -> dict[str, Any]:
        source = self.node_src(node)
        cp: dict[str, Any] = {"id": node.id}
        self.coverage.became(source, f"checkpoint {J}.{node.id}")
        if node.name:
            cp["goal"] = node.name
        if node.instruction:
            cp["guidance"] = self.text.template(node.instruction, source, speech=True)
        if node.static_text:
            cp["say_verbatim"] = self.text.template(node.static_text, source, speech=True)
        slots = {k: self.slots[k] for e in node.edges for k in (e.input_schema.properties if e.input_schema else {})}
        if slots:
            cp["slots"] = slots
        for trigger in node.actions:
            self.used_actions.add(trigger.action_id)
            if trigger.trigger_type == "on_enter":
                cp.setdefault("on_enter", []).append(trigger.action_id)
            else:
                self.coverage.gap(source, f"on_exit action {trigger.action_id!r} has no equivalent yet")
        if node.max_turns is not None:
            cp["turn_budget"] = node.max_turns
        if node.is_final:
            cp.update(terminal=True, outcome=node.id)
            for index, edge in enumerate(node.edges):
                self.coverage.gap(self.edge_src(node, edge, index), "an edge of a final node never runs")
        else:
            rules = self.rules_for(node, node.edges, node)
            if rules:
                cp["advance_when"] = rules
        return cp

    # --- the whole flow ----------------------------------------------------------------

    def compile(self) -> dict[str, Any]:
        flow = self.flow
        tools = [self.text.tool(action) for action in flow.actions]
        handlers, handler_nodes = self.handlers()
        middleware, refresh_nodes = None, set()
        interrupts = []
        for index, edge in enumerate(flow.global_edges):
            target = self.nodes.get(edge.target_node_id or "")
            source = self.edge_src(None, edge, index)
            if target is None:
                self.coverage.gap(source, "no target node")
            elif _REFRESH.search(edge.condition) and target.actions and not target.speaks:
                status = re.search(r"\b([45]\d\d)\b", edge.condition)
                middleware = {"on_status": int(status.group(1)) if status else 401,
                              "refresh_with": target.actions[0].action_id}
                self.used_actions.update(t.action_id for t in target.actions)
                refresh_nodes.add(target.id)
                self.coverage.became(source, f"middleware on_status {middleware['on_status']}")
                self.coverage.became(self.node_src(target), f"middleware refresh_with {middleware['refresh_with']}")
            elif target.speaks:
                interrupt_id = edge.id or f"global_{index}"
                goodbye = bool(_GOODBYE.search(interrupt_id) or _GOODBYE.search(edge.condition))
                interrupts.append({"id": interrupt_id, "when": edge.condition, "judge": "llm",
                                   "to": f"{J}.{target.id}", "kind": "goodbye" if goodbye else "other"})
                self.coverage.became(source, f"interrupt {interrupt_id} → {J}.{target.id}")
            else:
                self.coverage.gap(source, f"target {target.id!r} does not speak")
        silence, prompt_nodes = self.silence_policy()
        skip = handler_nodes | refresh_nodes | prompt_nodes
        checkpoints = [self.checkpoint(n) for n in flow.nodes if n.speaks and n.id not in skip]
        mapped = {cp["id"] for cp in checkpoints} | skip | {
            n.id for n in flow.nodes if not n.speaks and self.inbound[n.id]
        }
        for node in flow.nodes:
            if node.id not in mapped:
                self.coverage.gap(self.node_src(node), "did not map: nothing leads to it")
            elif node.id not in skip and node.id != flow.initial_node and not self.inbound[node.id]:
                self.coverage.note(self.node_src(node), "an orphan: no edge leads to it (kept, unreachable)")
        for action in flow.actions:
            if action.id not in self.used_actions:
                self.coverage.note(f"actions.{action.id}", "never used by a node or an edge")
        if "{{" in flow.system_prompt:
            self.coverage.became("system_prompt", "persona")
            self.coverage.note("system_prompt", "templates in the persona are never rendered; kept as written")
        full: dict[str, Any] = {
            "journeys": {J: {"checkpoints": checkpoints + self.synthetic}},
            "initial": f"{J}.{flow.initial_node}",
        }
        optional = {
            "name": flow.name, "persona": flow.system_prompt, "env": self.env(),
            "call_start": self.call_start(), "guidelines": self.guidelines(),
            "tools": tools, "pipelines": list(self.pipelines.values()), "handlers": handlers,
            "interrupts": interrupts, "middleware": middleware,
            "policies": {"silence": silence} if silence else None,
        }
        full.update({k: v for k, v in optional.items() if v})
        return full

    def env(self) -> dict[str, str]:
        """The flow's env, less the keys that became call-start values."""
        return {k: v for k, v in self.flow.environment_variables.items() if k not in self.speech_env}

    def call_start(self) -> dict[str, Any]:
        """Names templates read that nothing in the flow provides: values the call starts with
        (superdialog's dispatch-time variables), and env keys only speech reads."""
        out: dict[str, Any] = {}
        for name in sorted(self.text.call_start):
            spec: dict[str, Any] = {"type": "str"}
            literal = self.flow.environment_variables.get(name)
            if literal is not None:
                spec["default"] = literal
                spec["description"] = "flow env value read in speech"
            out[name] = spec
        return out

    def guidelines(self) -> dict[str, Any]:
        """``agent_language`` / ``agent_tone`` / ``agent_gender`` (and a clock zone) → guidelines."""
        flow, out = self.flow, {}
        if flow.agent_language:
            out["language"] = flow.agent_language
        if flow.agent_tone in ("professional", "casual"):
            out["tone"] = flow.agent_tone
        elif flow.agent_tone:
            self.coverage.gap("agent_tone", f"{flow.agent_tone!r} is not professional or casual; "
                              "the tone stays professional (as in superdialog)")
        if flow.agent_gender.lower() in ("male", "female", "neutral"):
            out["gender"] = flow.agent_gender.lower()
        elif flow.agent_gender:
            self.coverage.gap("agent_gender", f"{flow.agent_gender!r} is not male, female or neutral; left out")
        zones = sorted(self.text.clock_zones)
        if len(zones) == 1:
            out["timezone"] = zones[0]  # current_time_Asia_Kolkata: the author's clock
        elif zones:
            self.coverage.gap("guidelines.timezone", f"templates read the time in several zones ({', '.join(zones)}); "
                              "clock.time is in UTC")
        for key in ("agent_language", "agent_tone", "agent_gender"):
            if getattr(flow, key):
                self.coverage.became(key, f"guidelines.{key.removeprefix('agent_')}")
        return out

    def warnings(self, doc: dict[str, Any]) -> list[Problem]:
        """One warning naming every key this engine does not act on yet (with counts)."""
        counts = inert_keys(self.flow)
        for alias, key in ALIASES.items():
            if alias in doc and key in doc:
                counts[f"{alias} (superdialog uses {key} when both are given)"] = 1
        if not counts:
            return []
        named = ", ".join(f"{k} ({n})" if n > 1 else k for k, n in counts.items())
        return [Problem("", f"flow keys this engine does not act on yet are ignored: {named}",
                        "they load as superdialog's files are; remove them to silence this warning", "warning")]

    def handlers(self) -> tuple[list[dict[str, Any]], set[str]]:
        handlers, nodes = [], set()
        for node in self.flow.nodes:
            if node.id == self.flow.initial_node or self.inbound[node.id] or not node.actions:
                continue
            match = _HANDLER.search(node.instruction or "")
            if not match:
                continue
            steps = [{"tool": t.action_id} for t in node.actions]
            self.used_actions.update(t.action_id for t in node.actions)
            targets = [e.target_node_id for e in node.edges if e.target_node_id in self.nodes]
            if len(targets) == 1 and self.nodes[targets[0]].speaks:
                steps[-1]["on"] = {"ok": f"{J}.{targets[0]}"}
            elif node.edges:
                self.coverage.gap(self.node_src(node), "a handler routes to at most one node; edges left out")
            pipeline_id = f"{node.id}_pipeline"
            self.pipelines[pipeline_id] = {"id": pipeline_id, "steps": steps}
            event = f"{match.group(1).lower()}.{match.group(2) or node.id}"
            handlers.append({"id": node.id, "on": event, "pipeline": pipeline_id})
            self.coverage.became(self.node_src(node), f"handler {node.id} on {event}")
            nodes.add(node.id)
        return handlers, nodes

    def silence_policy(self) -> tuple[dict[str, Any] | None, set[str]]:
        """Prompt nodes reached only on silence → prompts; the final one → ``then``."""
        prompts_nodes = [n for n in self.flow.nodes if n.id in self.silent and not n.is_final]
        if not prompts_nodes:
            finals = [n for n in self.flow.nodes if n.id in self.silent and n.is_final]
            return ({"max_prompts": 0, "then": f"{J}.{finals[0].id}"} if finals else None), set()
        prompts: list[str] = []
        node: FlowNode | None = prompts_nodes[0]
        used: set[str] = set()
        then = ""
        while node is not None and node.id not in used:
            if node.is_final:
                then = f"{J}.{node.id}"
                break
            used.add(node.id)
            source = self.node_src(node)
            prompts.append(self.text.template(node.static_text or node.instruction or "", source, speech=True))
            self.coverage.became(source, f"policies.silence prompt {len(prompts)}")
            nxt = [e.target_node_id for e in node.edges if _SILENCE.search(e.condition) and e.target_node_id]
            node = self.nodes.get(nxt[0]) if nxt else None
        for other in prompts_nodes:
            if other.id not in used:
                self.coverage.gap(self.node_src(other), "only one silence ladder is supported")
        policy: dict[str, Any] = {"max_prompts": len(prompts), "prompts": prompts}
        if then:
            policy["then"] = then
        return policy, used


__all__ = ["CoverageEntry", "compile_flow", "flow_author_path"]
