"""The simple format (a ``playbook:`` list of prose steps) lowered to the full format.

Lowering follows superdialog (reference/superdialog-engine.md §1.14) with the differences of
SPEC §2.2: a lowered step's gate defaults to **soft**, there is no default ``turn_budget``, the
companion ``slots.x is not None`` expr rule is added only to steps without ``branches`` (else a
filled slot would skip the branch the caller chose), interrupt targets may be bare (``close``)
or qualified (``main.close``), and unknown keys are errors with a did-you-mean hint.

One step becomes one checkpoint of journey ``main``: ``purpose`` → goal, ``say`` → guidance,
``collect`` → str slots (soft), ``then_say`` → exit_say. A step is terminal when it says so or
when it is the last step without ``then``. A non-terminal step gets, in order: the companion
expr rule (when it has a require-set, no branches and entity ``caller``), one llm rule per
branch, and the ``done_when`` llm rule to ``then`` (default: the next step) requiring the
require-set (``require``, else all of ``collect`` when it has at most two keys).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..errors import Problem
from .problems import hint_for, join_path, split_path, validate_best_effort
from .yaml12 import dump_yaml_text

JOURNEY = "main"


class _Simple(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SimplePersona(_Simple):
    name: str = ""
    language: str | list[str] = "en"
    voice_style: str = ""
    identity: str = ""


class SimpleBranch(_Simple):
    when: str
    to: str
    requires: list[str] = Field(default_factory=list)


class SimpleStep(_Simple):
    id: str
    purpose: str = ""
    say: str = ""
    collect: list[str] = Field(default_factory=list)
    done_when: str = "step complete"
    then: str | None = None
    terminal: bool = False
    outcome: str | None = None
    entity: str = "caller"
    turn_budget: int | None = Field(default=None, ge=1)
    kb: bool | None = None
    require: list[str] | None = None
    gate: Literal["soft", "hard"] | None = None
    branches: list[SimpleBranch] = Field(default_factory=list)
    then_say: str = ""


class SimpleObjection(_Simple):
    trigger: str
    handle: str


class SimpleInterrupt(_Simple):
    id: str = ""
    when: str
    to: str
    resume: bool = False
    kind: Literal["goodbye", "other"] | None = None


class SimpleDoc(_Simple):
    """The simple format. ``call_start`` and ``policies`` pass through to the full format (ours)."""

    name: str = ""
    goal: str = ""
    persona: SimplePersona | str = Field(default_factory=SimplePersona)  # a string: the identity
    opening: str = ""
    closing: str = ""
    playbook: list[SimpleStep] = Field(min_length=1)
    facts: dict[str, Any] = Field(default_factory=dict)
    objections: list[SimpleObjection] = Field(default_factory=list)
    boundaries: list[str] = Field(default_factory=list)
    fallback_actions: dict[str, str] = Field(default_factory=dict)
    interrupts: list[SimpleInterrupt] = Field(default_factory=list)
    channel: str | None = None
    tone: str | None = None
    call_type: str | None = None
    timezone: str | None = None
    memory_enabled: bool | None = None
    followup_enabled: bool | None = None
    supervisor: bool | None = None
    multi_entity: bool = False
    legacy_continuity: bool = False
    call_start: dict[str, Any] = Field(default_factory=dict)
    policies: dict[str, Any] = Field(default_factory=dict)


_GUIDELINE_KEYS = ("channel", "tone", "call_type", "timezone", "memory_enabled", "followup_enabled", "supervisor")


def lower_simple(doc: dict[str, Any]) -> tuple[dict[str, Any], list[Problem]]:
    """The full-format document for a simple-format ``doc``, and the problems found.

    The document is best-effort when there are errors (what is wrong left out), and empty
    when nothing could be lowered."""
    full, problems, _ = lower_simple_mapped(doc)
    return full, problems


def lower_simple_mapped(doc: dict[str, Any]) -> tuple[dict[str, Any], list[Problem], Callable[[str], str]]:
    """``lower_simple`` plus a function that maps a path of the lowered full-format document
    to the simple-format key the author wrote (``journeys.main.checkpoints[1].guidance`` →
    ``playbook[1].say``)."""
    simple, problems, repair = validate_best_effort(SimpleDoc, doc)
    if simple is None:
        return {}, problems, lambda path: path
    lowered: list[Problem] = []
    full = _lower(simple, lowered)
    for problem in lowered:
        problem = repair.original(problem)
        if not repair.is_follow_on(problem):
            problems.append(problem)
    steps = [s if isinstance(s, dict) else {} for s in doc.get("playbook", [])]

    def author_path(path: str) -> str:
        parts = split_path(path)
        if parts is None:
            return path
        if parts[:3] == ["journeys", JOURNEY, "checkpoints"] and len(parts) > 3 and isinstance(parts[3], int):
            index = repair.original_parts(["playbook", parts[3]])[1]
            rest = parts[4:]
            field = rest[0] if rest else None
            if field == "guidance" and index == 0 and not (index < len(steps) and steps[index].get("say")):
                return "opening"
            step = steps[index] if index < len(steps) else {}
            if field == "advance_when" and len(rest) > 1 and isinstance(rest[1], int):
                origin = _rule_origin(full, parts[3], rest[1], step, rest[2:])
                if origin[:1] == ["branches"]:
                    origin[1] = repair.original_parts(["playbook", parts[3], "branches", origin[1]])[3]
                return join_path("", "playbook", index, *origin)
            renamed = _STEP_FIELDS.get(field) if isinstance(field, str) else None
            if renamed is not None:
                rest = [renamed] if field in ("slots", "advance_when") else [renamed, *rest[1:]]
            elif field in _STEP_KEPT:
                pass
            else:
                rest = []
            return join_path("", "playbook", index, *rest)
        if parts[:1] == ["interrupts"]:
            return join_path("", *repair.original_parts(parts))
        if parts[:1] == ["guidelines"] and len(parts) > 1:
            return join_path("", "persona", "language") if parts[1] == "language" else join_path("", *parts[1:])
        if parts == ["knowledge_base"]:
            return "facts.knowledge_base"
        return path

    return full, problems, author_path


def _rule_origin(full: dict[str, Any], cp_index: int, rule_index: int, step: dict[str, Any],
                 rest: list[Any]) -> list[Any]:
    """Where lowered rule ``rule_index`` came from: the companion expr rule from ``require``
    (or ``collect``), then one rule per branch, then ``done_when``."""
    try:
        rules = full["journeys"][JOURNEY]["checkpoints"][cp_index]["advance_when"]
        companion = rules[0].get("judge") == "expr"
    except (KeyError, IndexError, TypeError, AttributeError):
        return []
    keys = "require" if "require" in step else "collect"
    if companion and rule_index == 0:
        return [keys]
    branch = rule_index - companion
    branches = step.get("branches") if isinstance(step.get("branches"), list) else []
    if branch < len(branches):
        return ["branches", branch, *rest]
    return [keys] if rest[:1] == ["requires"] else ["done_when"]


_STEP_FIELDS = {"guidance": "say", "exit_say": "then_say", "goal": "purpose", "slots": "collect",
                "uses_kb": "kb", "advance_when": "done_when"}
_STEP_KEPT = {"id", "turn_budget", "gate", "entity", "outcome", "terminal"}


def _lower(simple: SimpleDoc, problems: list[Problem]) -> dict[str, Any]:
    step_ids = [step.id for step in simple.playbook]
    seen: dict[str, int] = {}
    for index, step_id in enumerate(step_ids):
        if step_id in seen:
            problems.append(Problem(join_path("playbook", index, "id"), f"duplicate step id {step_id!r}",
                                    f"the first is playbook[{seen[step_id]}]; give each step a unique id"))
        seen.setdefault(step_id, index)
    checkpoints = [
        _lower_step(simple, index, step, step_ids, problems) for index, step in enumerate(simple.playbook)
    ]
    full: dict[str, Any] = {
        "persona": persona_prose(simple),
        "journeys": {JOURNEY: {"checkpoints": checkpoints}},
    }
    if simple.name:
        full["name"] = simple.name
    kb = simple.facts.get("knowledge_base")
    if kb:
        full["knowledge_base"] = kb if isinstance(kb, str) else _yaml_block(kb)
    interrupts = [_lower_interrupt(index, item, step_ids, problems) for index, item in enumerate(simple.interrupts)]
    if interrupts:
        full["interrupts"] = interrupts
    language = simple.persona.language if isinstance(simple.persona, SimplePersona) else "en"
    guidelines: dict[str, Any] = {"language": language}
    for key in _GUIDELINE_KEYS:
        if getattr(simple, key) is not None:
            guidelines[key] = getattr(simple, key)
    full["guidelines"] = guidelines
    for key in ("multi_entity", "legacy_continuity"):
        if getattr(simple, key):
            full[key] = True
    if simple.call_start:
        full["call_start"] = simple.call_start
    if simple.policies:
        full["policies"] = simple.policies
    return full


def _target(step_ids: list[str], to: str, path: str, problems: list[Problem], *, allow_qualified: bool) -> str:
    """``main.<to>`` for a step id; qualified refs accepted where ``allow_qualified``."""
    bare = to.removeprefix(f"{JOURNEY}.") if allow_qualified else to
    if bare not in step_ids:
        hint = hint_for(bare, step_ids) or "steps: " + ", ".join(step_ids)
        problems.append(Problem(path, f"unknown step {to!r}", hint))
    return f"{JOURNEY}.{bare}"


def _lower_step(
    simple: SimpleDoc, index: int, step: SimpleStep, step_ids: list[str], problems: list[Problem]
) -> dict[str, Any]:
    path = join_path("playbook", index)
    default_next = step_ids[index + 1] if index + 1 < len(step_ids) else None
    then = step.then
    if then is not None and not then.strip():
        problems.append(Problem(join_path(path, "then"), "then is empty",
                                "name the next step, or leave then out to go to the next one"))
        then = None
    terminal = step.terminal or (default_next is None and then is None)
    guidance = step.say or (simple.opening if index == 0 else "")
    cp: dict[str, Any] = {"id": step.id}
    if step.purpose:
        cp["goal"] = step.purpose
    if guidance:
        cp["guidance"] = guidance
    if step.entity != "caller":
        cp["entity"] = step.entity
    if step.kb is not None:
        cp["uses_kb"] = step.kb
    require = step.require if step.require is not None else (step.collect if len(step.collect) <= 2 else [])
    if step.collect:
        cp["slots"] = {
            key: {"type": "str", "gate": "soft", "required": key in require} for key in step.collect
        }
    if step.turn_budget is not None:
        cp["turn_budget"] = step.turn_budget
    if terminal:
        if then is not None:
            problems.append(Problem(join_path(path, "then"), "a terminal step has no next step",
                                    "remove then, or terminal: true"))
        if step.branches:
            problems.append(Problem(join_path(path, "branches"), "a terminal step cannot branch",
                                    "remove branches, or terminal: true"))
        if step.then_say:
            problems.append(Problem(join_path(path, "then_say"), "a terminal step is never left, so then_say never plays",
                                    "move the line into say"))
        cp.update(terminal=True, outcome=step.outcome or "closed")
        if step.gate is not None:
            cp["gate"] = step.gate
        return cp
    if step.outcome is not None and step.outcome != "closed":
        problems.append(Problem(join_path(path, "outcome"), f"outcome {step.outcome!r} on a step that is not terminal",
                                "add terminal: true or remove outcome"))
    if then == step.id:
        problems.append(Problem(join_path(path, "then"), f"step {step.id!r} cannot lead to itself",
                                "name another step, or leave then out to go to the next one"))
    next_id = then or default_next
    assert next_id is not None  # not terminal, so there is a then or a next step
    next_ref = _target(step_ids, next_id, join_path(path, "then"), problems, allow_qualified=True)
    rules: list[dict[str, Any]] = []
    if require and step.entity == "caller" and not step.branches:
        rules.append({
            "when": " and ".join(f"slots.{key} is not None" for key in require),
            "judge": "expr", "to": next_ref,
        })
    targets: set[str] = set()
    for b_index, branch in enumerate(step.branches):
        b_path = join_path(path, "branches", b_index)
        to = branch.to.removeprefix(f"{JOURNEY}.")
        if not branch.when.strip():
            problems.append(Problem(join_path(b_path, "when"), "a branch needs a non-blank when",
                                    "say when the caller takes this path"))
        if to == step.id:
            problems.append(Problem(join_path(b_path, "to"), f"step {step.id!r} cannot branch to itself"))
        elif to == next_id:
            problems.append(Problem(join_path(b_path, "to"), f"branch to {to!r}, where the step goes anyway",
                                    "use done_when for that path"))
        elif to in targets:
            problems.append(Problem(join_path(b_path, "to"), f"duplicate branch target {to!r}",
                                    "merge the two branches into one when"))
        targets.add(to)
        rule: dict[str, Any] = {
            "when": branch.when, "judge": "llm",
            "to": _target(step_ids, branch.to, join_path(b_path, "to"), problems, allow_qualified=True),
        }
        if branch.requires:
            rule["requires"] = list(branch.requires)
        rules.append(rule)
    done: dict[str, Any] = {"when": step.done_when, "judge": "llm", "to": next_ref}
    if require:
        done["requires"] = list(require)
    rules.append(done)
    cp["advance_when"] = rules
    cp["gate"] = step.gate or "soft"
    if step.then_say:
        cp["exit_say"] = step.then_say
    return cp


def _lower_interrupt(index: int, item: SimpleInterrupt, step_ids: list[str], problems: list[Problem]) -> dict[str, Any]:
    path = join_path("interrupts", index, "to")
    spec: dict[str, Any] = {
        "id": item.id or f"interrupt_{index}",
        "when": item.when,
        "judge": "llm",
        "to": _target(step_ids, item.to, path, problems, allow_qualified=True),
    }
    if item.resume:
        spec["resume"] = True
    if item.kind is not None:
        spec["kind"] = item.kind
    return spec


# --- persona prose -------------------------------------------------------------------------


def language_name(code: str) -> str:
    """English name of an ISO 639-1 code (``it`` → ``Italian``); unknown codes stay as written."""
    from babel import Locale, UnknownLocaleError

    try:
        return Locale.parse(code.replace("-", "_")).get_display_name("en") or code
    except (UnknownLocaleError, ValueError, TypeError):
        return code


def _yaml_block(data: Any) -> str:
    return dump_yaml_text(data).strip()


def persona_prose(simple: SimpleDoc) -> str:
    """The persona text superdialog builds from the simple format's persona, facts and lists."""
    persona = simple.persona if isinstance(simple.persona, SimplePersona) else SimplePersona(identity=simple.persona)
    blocks: list[str] = []
    if persona.identity:
        blocks.append(persona.identity.strip())
    if persona.name and persona.name.lower() not in persona.identity.lower():
        blocks.append(f"Your name is {persona.name}.")
    languages = [persona.language] if isinstance(persona.language, str) else list(persona.language)
    if languages:
        line = f"Default conversation language: {language_name(languages[0])}."
        if len(languages) > 1:
            line += " Also speaks: " + ", ".join(language_name(code) for code in languages[1:]) + "."
        blocks.append(line)
    if persona.voice_style:
        blocks.append(f"Voice & manner: {persona.voice_style}")
    if simple.goal:
        blocks.append(f"Overall goal: {simple.goal}")
    facts = {k: v for k, v in simple.facts.items() if k != "knowledge_base"}
    if facts:
        blocks.append("## Reference facts (never invent beyond these)\n" + _yaml_block(facts))
    boundaries = [b.lower() for b in simple.boundaries]
    objections = [
        f"- If {o.trigger} -> {o.handle}"
        for o in simple.objections
        if not any(o.handle.lower() in b or b in o.handle.lower() for b in boundaries)
    ]
    if objections:
        blocks.append("## Objection handling\n" + "\n".join(objections))
    if simple.boundaries:
        blocks.append("## Hard boundaries\n" + "\n".join(f"- {b}" for b in simple.boundaries))
    if simple.fallback_actions:
        blocks.append("## Fallback actions\n" + "\n".join(f"- {k}: {v}" for k, v in simple.fallback_actions.items()))
    if simple.closing:
        blocks.append(f"## Closing line\n{simple.closing}")
    return "\n\n".join(blocks)


__all__ = ["JOURNEY", "SimpleDoc", "SimpleStep", "language_name", "lower_simple", "lower_simple_mapped", "persona_prose"]
