"""Problems of a compiled legacy flow, located in the flow document the author wrote.

``flow_author_path`` maps a path of the full-format document ``flow.compile_flow`` built
(``journeys.main.checkpoints[4].guidance``, ``tools[1].url``, ``env.X``) to the node, action
or key of the flow it came from (``nodes[4].instruction``, ``actions[1].url``,
``environment_variables.X``). ``flow.py`` re-exports it.
"""

from __future__ import annotations

from typing import Any

from .problems import join_path, split_path

J = "main"  # the one journey a legacy flow compiles into (``flow.J``)

_NODE_FIELDS = {"guidance": "instruction", "say_verbatim": "static_text", "turn_budget": "max_turns",
                "goal": "name", "advance_when": "edges", "slots": "edges", "on_enter": "actions"}
_ACTION_FIELDS = {"body": "body_template", "url": "url", "headers": "headers", "method": "method",
                  "timeout": "timeout"}


def flow_author_path(doc: dict[str, Any], full: dict[str, Any], path: str) -> str:
    """A path of the compiled full-format document → the node, action or key of ``doc``."""
    parts = split_path(path)
    if parts is None:
        return path
    nodes = [n.get("id") if isinstance(n, dict) else None for n in doc.get("nodes") or []]
    actions = [a.get("id") if isinstance(a, dict) else None for a in doc.get("actions") or []]
    if parts[:3] == ["journeys", J, "checkpoints"] and len(parts) > 3 and isinstance(parts[3], int):
        try:
            cp_id = full["journeys"][J]["checkpoints"][parts[3]]["id"]
        except (KeyError, IndexError, TypeError):
            return path
        rest = parts[4:]
        if cp_id not in nodes:
            cp_id, rest = cp_id.split("__", 1)[0], []  # a synthetic checkpoint: its source node
        if cp_id not in nodes:
            return path
        field = rest[0] if rest else None
        renamed = _NODE_FIELDS.get(field) if isinstance(field, str) else None
        rest = [renamed] if renamed in ("edges", "actions") else [renamed, *rest[1:]] if renamed else []
        return join_path("", "nodes", nodes.index(cp_id), *rest)
    if parts[:1] == ["tools"] and len(parts) > 1 and isinstance(parts[1], int):
        try:
            tool_id = full["tools"][parts[1]]["id"]
        except (KeyError, IndexError, TypeError):
            return path
        if tool_id in actions:
            field = parts[2] if len(parts) > 2 else None
            renamed = _ACTION_FIELDS.get(field) if isinstance(field, str) else None
            return join_path("", "actions", actions.index(tool_id), *([renamed, *parts[3:]] if renamed else []))
    if parts[:1] == ["env"]:
        return join_path("", "environment_variables", *parts[1:])
    return {"persona": "system_prompt", "initial": "initial_node"}.get(path, path)


__all__ = ["flow_author_path"]
