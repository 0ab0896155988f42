"""Mermaid flowchart of a playbook: journeys, checkpoints, rules, pipeline routes, interrupts."""

from __future__ import annotations

import re

from superdialog_core.playbook import Playbook, RetrySpec

__all__ = ["mermaid"]

_UNSAFE = re.compile(r'["\[\]{}()<>|#;`]')


def _node_id(ref: str) -> str:
    # Mermaid ids must be plain words; refs contain dots.
    return "n_" + re.sub(r"\W", "_", ref)


def _label(text: str, limit: int = 48) -> str:
    text = _UNSAFE.sub(" ", " ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def mermaid(playbook: Playbook) -> str:
    """A ``flowchart TD`` with one subgraph per journey.

    Terminal checkpoints are stadiums labelled with their outcome, hard gates are hexagons,
    llm rules are solid arrows, expr rules dotted, pipeline routes and ``on_failure`` thick,
    interrupts dashed from a shared "any step" node.
    """
    lines = ["flowchart TD"]
    initial = playbook.initial_ref
    lines.append(f'  start(("start")) --> {_node_id(initial)}')
    for journey_name, journey in playbook.journeys.items():
        journey_id = "j_" + re.sub(r"\W", "_", journey_name)
        lines.append(f'  subgraph {journey_id}["{_label(journey_name)}"]')
        for cp in journey.checkpoints:
            ref = f"{journey_name}.{cp.id}"
            nid = _node_id(ref)
            if cp.terminal:
                outcome = f": {cp.outcome}" if cp.outcome else ""
                lines.append(f'    {nid}(["{_label(cp.id + outcome)}"])')
            elif cp.gate == "hard":
                lines.append(f'    {nid}{{{{"{_label(cp.id)} (hard gate)"}}}}')
            else:
                lines.append(f'    {nid}["{_label(cp.id)}"]')
        lines.append("  end")
    for ref, cp in playbook.checkpoints.items():
        src = _node_id(ref)
        for rule in cp.advance_when:
            arrow = "-.->" if rule.judge == "expr" else "-->"
            lines.append(f'  {src} {arrow}|"{_label(rule.id or rule.when)}"| {_node_id(rule.to)}')
        if cp.on_failure:
            lines.append(f'  {src} ==>|"on_failure"| {_node_id(cp.on_failure)}')
        if cp.pipeline and cp.pipeline in {p.id for p in playbook.pipelines}:
            for step in playbook.pipeline(cp.pipeline).steps:
                for key, outcome in step.on.items():
                    target = outcome.on_exhaust if isinstance(outcome, RetrySpec) else outcome
                    if target and target != "continue":
                        label = _label(f"{step.tool} {key}")
                        lines.append(f'  {src} ==>|"{label}"| {_node_id(target)}')
    if playbook.interrupts:
        lines.append('  any(("any step"))')
        for interrupt in playbook.interrupts:
            lines.append(f'  any -.->|"{_label(interrupt.id)}"| {_node_id(interrupt.to)}')
    silence = playbook.policies.silence
    if silence and silence.then:
        lines.append(f'  any_silence(("silence")) -.-> {_node_id(silence.then)}')
    return "\n".join(lines) + "\n"
