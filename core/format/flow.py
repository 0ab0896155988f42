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
* ``{{X}}`` in templates → ``env.X`` (tools only: env never reaches speech), ``results.X``
  (``.success`` → ``.ok``) or ``slots.X``. The persona is kept verbatim (it is never rendered).

``compile_flow`` returns the full document, the problems (unknown keys, duplicate ids, unknown
targets) and the coverage report: everything that did not map (empty when all did).
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import Problem
from .flow_paths import J, flow_author_path
from .flow_schema import ConversationFlow, FlowEdge, FlowNode
from .flow_text import FlowText, slot_spec
from .problems import hint_for, join_path, validate_best_effort

_SILENCE = re.compile(r"silence|no response|not respond", re.IGNORECASE)
_GOODBYE = re.compile(r"\b(good\s?bye|bye|end (the|this) call|hang up)\b", re.IGNORECASE)
_REFRESH = re.compile(r"\b401\b|token", re.IGNORECASE)
_HANDLER = re.compile(r"\b(webhook|timer)\b(?:[\s.:_-]+([A-Za-z][A-Za-z0-9_]*))?", re.IGNORECASE)


def compile_flow(doc: dict[str, Any]) -> tuple[dict[str, Any], list[Problem], list[str]]:
    """``(full-format document, problems, coverage report)`` for a legacy flow document.

    With problems, the document is best-effort (unknown keys and bad values left out, edges to
    unknown nodes cut, unknown actions skipped) so the full format's checks can still run; it
    is empty when nothing could be compiled (no usable initial node)."""
    flow, problems, repair = validate_best_effort(ConversationFlow, doc)
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
    return full, problems, [] if problems else compiler.coverage


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
        self.coverage: list[str] = []
        self.text = FlowText(set(flow.environment_variables), self.results, set(self.slots), self.coverage)
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


    def rules_for(self, node: FlowNode, edges: list[FlowEdge], where: str, depth: int = 0) -> list[dict[str, Any]]:
        rules: list[dict[str, Any]] = []
        for index, edge in enumerate(edges):
            label = f"{where} edge {edge.id or index}"
            if edge.target_node_id is None:
                self.coverage.append(f"{label}: no target node")
                continue
            if node.id in self.silent or (_SILENCE.search(edge.condition) and edge.target_node_id in self.silent):
                continue  # covered by policies.silence
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
                folded = self.rules_for(node, target.edges, f"node {target.id!r}", depth + 1)
                if judge == "llm":
                    for sub in folded:
                        if sub["judge"] == "llm":
                            sub["when"] = f"{edge.condition} and {sub['when']}"
                rules.extend(folded)
                continue
            else:
                self.coverage.append(f"{label}: routing nodes nested too deeply")
                continue
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
            on: dict[str, Any] = {}
            next_node: FlowNode | None = None
            for out in node.edges:
                key = self.text.failure_key(out.condition)
                target = self.nodes.get(out.target_node_id or "")
                if key and target is not None and target.speaks:
                    on[key] = f"{J}.{target.id}"
                    if key == "failed" or failure is None:
                        failure = on[key]
                elif target is not None and next_node is None:
                    next_node = target
                else:
                    self.coverage.append(f"node {node.id!r} edge {out.id or out.condition!r}: second success path")
            for trigger in node.actions:
                self.used_actions.add(trigger.action_id)
                steps.append({"tool": trigger.action_id})
            if steps and on:
                steps[-1]["on"] = on
            node = next_node
        if node is not None and node.speaks:
            landing = f"{J}.{node.id}"
        else:
            self.coverage.append(f"pipeline {pipeline_id!r}: no node that speaks after the actions; returns to {src.id!r}")
        self.pipelines.setdefault(pipeline_id, {"id": pipeline_id, "steps": steps})
        return self.synthetic_checkpoint(src, edge, index, pipeline_id, landing or f"{J}.{src.id}",
                                         failure or f"{J}.{src.id}")

    def edge_actions(self, src: FlowNode, edge: FlowEdge, index: int) -> str:
        pipeline_id = f"{src.id}__{edge.id or index}"
        self.used_actions.update(t.action_id for t in edge.actions)
        self.pipelines[pipeline_id] = {"id": pipeline_id, "steps": [{"tool": t.action_id} for t in edge.actions]}
        target = self.nodes[edge.target_node_id or ""]
        if not target.speaks:
            self.coverage.append(f"node {src.id!r} edge {edge.id or index}: actions on an edge into a routing node")
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
        where = f"node {node.id!r}"
        cp: dict[str, Any] = {"id": node.id}
        if node.name:
            cp["goal"] = node.name
        if node.instruction:
            cp["guidance"] = self.text.template(node.instruction, where, speech=True)
        if node.static_text:
            cp["say_verbatim"] = self.text.template(node.static_text, where, speech=True)
        slots = {k: self.slots[k] for e in node.edges for k in (e.input_schema.properties if e.input_schema else {})}
        if slots:
            cp["slots"] = slots
        for trigger in node.actions:
            self.used_actions.add(trigger.action_id)
            if trigger.trigger_type == "on_enter":
                cp.setdefault("on_enter", []).append(trigger.action_id)
            else:
                self.coverage.append(f"{where}: on_exit action {trigger.action_id!r} has no equivalent")
        if node.max_turns is not None:
            cp["turn_budget"] = node.max_turns
        if node.is_final:
            cp.update(terminal=True, outcome=node.id)
            if node.edges:
                self.coverage.append(f"{where}: edges of a final node never run")
        else:
            rules = self.rules_for(node, node.edges, where)
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
            label = f"global edge {edge.id or index}"
            if target is None:
                self.coverage.append(f"{label}: no target node")
            elif _REFRESH.search(edge.condition) and target.actions and not target.speaks:
                status = re.search(r"\b([45]\d\d)\b", edge.condition)
                middleware = {"on_status": int(status.group(1)) if status else 401,
                              "refresh_with": target.actions[0].action_id}
                self.used_actions.update(t.action_id for t in target.actions)
                refresh_nodes.add(target.id)
            elif target.speaks:
                interrupt_id = edge.id or f"global_{index}"
                goodbye = bool(_GOODBYE.search(interrupt_id) or _GOODBYE.search(edge.condition))
                interrupts.append({"id": interrupt_id, "when": edge.condition, "judge": "llm",
                                   "to": f"{J}.{target.id}", "kind": "goodbye" if goodbye else "other"})
            else:
                self.coverage.append(f"{label}: target {target.id!r} does not speak")
        silence, prompt_nodes = self.silence_policy()
        skip = handler_nodes | refresh_nodes | prompt_nodes
        checkpoints = [self.checkpoint(n) for n in flow.nodes if n.speaks and n.id not in skip]
        mapped = {cp["id"] for cp in checkpoints} | skip | {
            n.id for n in flow.nodes if not n.speaks and self.inbound[n.id]
        }
        for node in flow.nodes:
            if node.id not in mapped:
                self.coverage.append(f"node {node.id!r} did not map (nothing leads to it)")
            elif node.id not in skip and node.id != flow.initial_node and not self.inbound[node.id]:
                self.coverage.append(f"node {node.id!r} is an orphan: no edge leads to it")
        for action in flow.actions:
            if action.id not in self.used_actions:
                self.coverage.append(f"action {action.id!r} is never used")
        if "{{" in flow.system_prompt:
            self.coverage.append("system_prompt: templates in the persona are never rendered; kept as written")
        full: dict[str, Any] = {
            "journeys": {J: {"checkpoints": checkpoints + self.synthetic}},
            "initial": f"{J}.{flow.initial_node}",
        }
        optional = {
            "name": flow.name, "persona": flow.system_prompt, "env": dict(flow.environment_variables),
            "tools": tools, "pipelines": list(self.pipelines.values()), "handlers": handlers,
            "interrupts": interrupts, "middleware": middleware,
            "policies": {"silence": silence} if silence else None,
        }
        full.update({k: v for k, v in optional.items() if v})
        return full


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
                self.coverage.append(f"node {node.id!r}: a handler routes to at most one node; edges left out")
            pipeline_id = f"{node.id}_pipeline"
            self.pipelines[pipeline_id] = {"id": pipeline_id, "steps": steps}
            handlers.append({"id": node.id, "on": f"{match.group(1).lower()}.{match.group(2) or node.id}",
                             "pipeline": pipeline_id})
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
            prompts.append(self.text.template(node.static_text or node.instruction or "", f"node {node.id!r}", speech=True))
            nxt = [e.target_node_id for e in node.edges if _SILENCE.search(e.condition) and e.target_node_id]
            node = self.nodes.get(nxt[0]) if nxt else None
        for other in prompts_nodes:
            if other.id not in used:
                self.coverage.append(f"node {other.id!r}: only one silence ladder is supported")
        policy: dict[str, Any] = {"max_prompts": len(prompts), "prompts": prompts}
        if then:
            policy["then"] = then
        return policy, used


__all__ = ["compile_flow", "flow_author_path"]
