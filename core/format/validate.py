"""Cross-reference and graph checks of a playbook, run once at load (SPEC §2.3).

Pydantic checks each field on its own; this module checks what spans fields: ids are unique,
every checkpoint ref names a real ``journey.id``, ``requires`` keys are declared, tools,
pipelines and handlers exist, every checkpoint can be reached and left, no ``${VAR}`` is unset,
and no known-but-ignored superdialog key is in use unnoticed. It also asks ``compiler.py`` to
compile every expression and template. ``validate_playbook`` returns every problem (errors and
warnings); the loader raises them together.
"""

from __future__ import annotations

import os
import re
import zoneinfo
from typing import TYPE_CHECKING

from ..errors import Problem
from .compiler import compile_playbook
from .lookups import iter_checkpoints
from .problems import hint_for, join_path

if TYPE_CHECKING:
    from .playbook import Checkpoint, PipelineSpec, Playbook

_STEP_KEY = re.compile(r"^(ok|failed|http_[1-5][0-9][0-9])$")


def validate_playbook(playbook: Playbook) -> list[Problem]:
    """Every problem of ``playbook``: errors first, then warnings. Compiles as a side effect."""
    checker = _Checker(playbook)
    checker.run()
    problems = [*checker.problems, *compile_playbook(playbook)]
    if not any(p.message.startswith("unknown checkpoint") for p in checker.problems):
        # With a broken ref the graph is incomplete: its warnings would only echo that error.
        problems.extend(_graph_warnings(playbook))
    problems.extend(_env_warnings(playbook))
    problems.extend(_unsupported_warning(playbook))
    errors = [p for p in problems if p.severity == "error"]
    return [*errors, *(p for p in problems if p.severity != "error")]


class _Checker:
    """Collects structural errors; one method per kind of check."""

    def __init__(self, playbook: Playbook) -> None:
        self.pb = playbook
        self.problems: list[Problem] = []
        self.refs = list(playbook.checkpoints)

    def error(self, path: str, message: str, hint: str | None = None) -> None:
        self.problems.append(Problem(path, message, hint))

    def warn(self, path: str, message: str, hint: str | None = None) -> None:
        self.problems.append(Problem(path, message, hint, severity="warning"))

    def run(self) -> None:
        self.journeys()
        self.duplicates()
        self.checkpoints()
        self.tools()
        self.pipelines()
        self.top_level_refs()
        self.settings()

    # --- ids ---------------------------------------------------------------------------

    def journeys(self) -> None:
        for name in self.pb.journeys:
            if "." in name:
                self.error(join_path("journeys", name), f"journey name must not contain '.': {name!r}",
                           f"rename it, e.g. {name.replace('.', '_')!r}")

    def duplicates(self) -> None:
        for journey_name, journey in self.pb.journeys.items():
            self._unique([cp.id for cp in journey.checkpoints],
                         join_path("journeys", journey_name, "checkpoints"), f"journey {journey_name!r}")
        self._unique([t.id for t in self.pb.tools], "tools", "tools")
        self._unique([p.id for p in self.pb.pipelines], "pipelines", "pipelines")
        self._unique([h.id for h in self.pb.handlers], "handlers", "handlers")
        self._unique([i.id for i in self.pb.interrupts], "interrupts", "interrupts")
        for path, ref, cp in iter_checkpoints(self.pb):
            self._unique([r.id or "" for r in cp.advance_when], join_path(path, "advance_when"),
                         f"checkpoint {ref!r} rules")

    def _unique(self, ids: list[str], base: str, where: str) -> None:
        first: dict[str, int] = {}
        for index, item in enumerate(ids):
            if item in first:
                self.error(join_path(base, index, "id"), f"{where}: duplicate id {item!r}",
                           f"the first is at {join_path(base, first[item])}; give each a unique id")
            else:
                first[item] = index

    # --- refs --------------------------------------------------------------------------

    def ref(self, ref: str, path: str) -> None:
        """A checkpoint ref must be a full ``journey.id`` of an existing checkpoint."""
        if ref in self.pb.checkpoints:
            return
        hint = None
        if "." not in ref:
            owners = [r for r in self.refs if r.split(".", 1)[1] == ref]
            if len(owners) == 1:
                hint = f"refs are journey.id: did you mean {owners[0]!r}?"
            elif owners:
                hint = "refs are journey.id, one of: " + ", ".join(owners)
        self.error(path, f"unknown checkpoint {ref!r}", hint or hint_for(ref, self.refs))

    def tool_ref(self, tool_id: str, path: str) -> None:
        if tool_id not in {t.id for t in self.pb.tools}:
            self.error(path, f"unknown tool {tool_id!r}", hint_for(tool_id, [t.id for t in self.pb.tools]))

    def pipeline_ref(self, pipeline_id: str, path: str) -> None:
        ids = [p.id for p in self.pb.pipelines]
        if pipeline_id not in ids:
            self.error(path, f"unknown pipeline {pipeline_id!r}", hint_for(pipeline_id, ids))

    # --- checkpoints -------------------------------------------------------------------

    def checkpoints(self) -> None:
        declared = self.pb.declared_slots()
        for path, ref, cp in iter_checkpoints(self.pb):
            for index, rule in enumerate(cp.advance_when):
                rule_path = join_path(path, "advance_when", index)
                self.ref(rule.to, join_path(rule_path, "to"))
                for k, key in enumerate(rule.requires):
                    if key not in declared and key not in rule.set_:
                        self.error(join_path(rule_path, "requires", k),
                                   f"requires key {key!r} is not declared in any checkpoint's slots, "
                                   "call_start, or this rule's set",
                                   hint_for(key, declared) or "declare it under some checkpoint's slots")
            if cp.on_failure is not None:
                self.ref(cp.on_failure, join_path(path, "on_failure"))
            if cp.pipeline is not None:
                self.pipeline_ref(cp.pipeline, join_path(path, "pipeline"))
            for index, tool_id in enumerate(cp.on_enter):
                self.tool_ref(tool_id, join_path(path, "on_enter", index))
            if cp.auto and not cp.advance_when:
                self.error(join_path(path, "auto"),
                           "an auto checkpoint needs an advance_when rule (it advances to the first rule's target)",
                           "add advance_when: [{when: next, to: <journey.id>}] or remove auto")
            if cp.terminal and cp.advance_when:
                self.error(join_path(path, "advance_when"),
                           f"terminal checkpoint {ref!r} ends the call, so its advance_when rules never run",
                           "remove advance_when or terminal: true")
            if cp.outcome is not None and not cp.terminal:
                self.warn(join_path(path, "outcome"),
                          f"outcome {cp.outcome!r} is only used by terminal checkpoints",
                          "add terminal: true or remove outcome")
            for key, spec in cp.slots.items():
                slot_path = join_path(path, "slots", key)
                if spec.default is not None:
                    self.error(join_path(slot_path, "default"), "default is only for call_start values",
                               "move the value to call_start, or remove default")
                if key in self.pb.call_start:
                    self.error(join_path("call_start", key),
                               f"call_start value {key!r} is also a slot of checkpoint {ref!r}",
                               "call-start values are never asked for; remove it from one of the two")
                if spec.type == "enum" and not spec.values:
                    self.error(join_path(slot_path, "values"), "an enum slot needs a non-empty values list",
                               "add values: [a, b] or use type: str")
                for k, other in enumerate(spec.invalidates):
                    result = other.removeprefix("results.")
                    stored = {t.store_response_as for t in self.pb.tools}
                    known = result in stored if other.startswith("results.") else other in declared
                    if not known:
                        self.warn(join_path(slot_path, "invalidates", k),
                                  f"invalidates {other!r}, which is neither a declared slot nor results.<stored tool result>",
                                  hint_for(other, [*declared, *(f"results.{s}" for s in stored if s)]))
                owner = self.pb.slot_owner(key)
                first = self.pb.slot_spec(key)
                # A different description only is normal (superdialog's compile_flow writes the
                # union of per-node edge schemas); it changes nothing but the Director's prompt.
                if owner != ref and first is not None and (
                        spec.model_dump(exclude={"description"}) != first.model_dump(exclude={"description"})):
                    self.warn(slot_path, f"slot {key!r} is declared again with a different spec: "
                              f"at {ref!r} this declaration governs what the Director extracts and how "
                              f"the value is coerced; the first declaration (in {owner!r}) governs its "
                              "gate and confirmation, authoritative and invalidates everywhere",
                              "declare a slot once, or give both declarations the same spec")

    # --- tools and pipelines -----------------------------------------------------------

    def tools(self) -> None:
        ids = {t.id for t in self.pb.tools}
        for index, tool in enumerate(self.pb.tools):
            path = join_path("tools", index)
            if tool.store_response_as == "pipeline":
                self.error(join_path(path, "store_response_as"),
                           f"tool {tool.id!r}: store_response_as 'pipeline' is reserved",
                           "pick another name; `pipeline` is the outcome of a checkpoint's pipeline")
            if tool.type == "http" and not tool.url:
                self.error(join_path(path, "url"), f"http tool {tool.id!r} has no url",
                           "add url: https://... or use type: python")
            if tool.compensate is not None:
                comp_path = join_path(path, "compensate")
                if tool.tier != "compensable":
                    self.error(comp_path, f"tool {tool.id!r}: compensate needs tier: compensable")
                if tool.compensate == tool.id:
                    self.error(comp_path, f"tool {tool.id!r} cannot compensate itself")
                elif tool.compensate not in ids:
                    self.tool_ref(tool.compensate, comp_path)
        if self.pb.middleware is not None:
            ref = self.pb.middleware.refresh_with
            if ref not in ids:
                self.error("middleware.refresh_with", f"middleware.refresh_with: unknown tool {ref!r}",
                           hint_for(ref, ids) or "name the tool that refreshes the token")

    def pipelines(self) -> None:
        for p_index, pipeline in enumerate(self.pb.pipelines):
            for s_index, step in enumerate(pipeline.steps):
                path = join_path("pipelines", p_index, "steps", s_index)
                self.tool_ref(step.tool, join_path(path, "tool"))
                for key, outcome in step.on.items():
                    out_path = join_path(path, "on", key)
                    if not _STEP_KEY.match(key):
                        self.error(out_path, f"unknown step outcome {key!r}",
                                   hint_for(key, ["ok", "failed"]) or "use ok, failed or http_<status>")
                    if not isinstance(outcome, str):
                        if key == "ok" or (key.startswith("http_2")):
                            self.error(out_path, "retry under a success outcome would repeat a call that worked",
                                       "put retry under failed or http_<error status>")
                        if outcome.on_exhaust is not None:
                            self.ref(outcome.on_exhaust, join_path(out_path, "on_exhaust"))
                    elif outcome != "continue":
                        self.ref(outcome, out_path)
        for index, handler in enumerate(self.pb.handlers):
            path = join_path("handlers", index)
            self.pipeline_ref(handler.pipeline, join_path(path, "pipeline"))
            kind, _, name = handler.on.partition(".")
            if not kind or not name:
                self.error(join_path(path, "on"), f"handler event {handler.on!r} must be '<kind>.<name>'",
                           "e.g. on: webhook.payment_captured")

    def top_level_refs(self) -> None:
        if self.pb.initial is not None:
            self.ref(self.pb.initial, "initial")
        for index, interrupt in enumerate(self.pb.interrupts):
            self.ref(interrupt.to, join_path("interrupts", index, "to"))
        for index, entry in enumerate(self.pb.dispatch):
            self.ref(entry.to, join_path("dispatch", index, "to"))
        silence = self.pb.policies.silence
        if silence is not None and silence.then:
            self.ref(silence.then, "policies.silence.then")
        failure = self.pb.policies.model_failure
        if failure is not None and failure.then:
            self.ref(failure.then, "policies.model_failure.then")

    def settings(self) -> None:
        """Values pydantic cannot check: the timezone and the phone region."""
        timezone = self.pb.guidelines.timezone
        try:
            zoneinfo.ZoneInfo(timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            self.error("guidelines.timezone", f"unknown timezone {timezone!r}",
                       hint_for(timezone, zoneinfo.available_timezones()) or "use an IANA name such as Europe/Berlin")
        region = self.pb.policies.phone_region
        if region is not None:
            import phonenumbers

            if region.upper() not in phonenumbers.SUPPORTED_REGIONS:
                self.error("policies.phone_region", f"unknown phone region {region!r}",
                           "use a two-letter region code such as DE or US")


# --- graph ---------------------------------------------------------------------------------


def _pipeline_targets(pipeline: PipelineSpec | None) -> list[str]:
    targets: list[str] = []
    for step in pipeline.steps if pipeline else []:
        for outcome in step.on.values():
            if not isinstance(outcome, str):
                if outcome.on_exhaust:
                    targets.append(outcome.on_exhaust)
            elif outcome != "continue":
                targets.append(outcome)
    return targets


def exits(playbook: Playbook, cp: Checkpoint) -> list[str]:
    """Refs a checkpoint can lead to on its own: rules, on_failure, its pipeline's outcomes."""
    targets = [rule.to for rule in cp.advance_when]
    if cp.on_failure:
        targets.append(cp.on_failure)
    if cp.pipeline:
        pipelines = playbook.__pydantic_private__["_pipelines"]  # id → spec, built at construction
        targets.extend(_pipeline_targets(pipelines.get(cp.pipeline)))
    return targets


def _graph_warnings(playbook: Playbook) -> list[Problem]:
    pipelines = {p.id: p for p in playbook.pipelines}
    roots = [playbook.initial_ref, *(i.to for i in playbook.interrupts), *(d.to for d in playbook.dispatch)]
    if playbook.policies.silence is not None and playbook.policies.silence.then:
        roots.append(playbook.policies.silence.then)
    if playbook.policies.model_failure is not None and playbook.policies.model_failure.then:
        roots.append(playbook.policies.model_failure.then)
    for handler in playbook.handlers:
        roots.extend(_pipeline_targets(pipelines.get(handler.pipeline)))
    seen: set[str] = set()
    queue = [r for r in roots if r in playbook.checkpoints]
    while queue:
        ref = queue.pop()
        if ref in seen:
            continue
        seen.add(ref)
        queue.extend(t for t in exits(playbook, playbook.checkpoints[ref]) if t in playbook.checkpoints)
    problems: list[Problem] = []
    known_start = playbook.initial_ref in playbook.checkpoints  # else "unknown initial" says it all
    for path, ref, cp in iter_checkpoints(playbook):
        if playbook.checkpoints.get(ref) is not cp:
            continue  # a duplicate id, already an error
        if known_start and ref not in seen:
            problems.append(Problem(
                path, f"checkpoint {ref!r} cannot be reached from {playbook.initial_ref!r}",
                "add a rule, interrupt or pipeline outcome that leads to it, or remove it", "warning"))
        if not cp.terminal and not exits(playbook, cp):
            problems.append(Problem(
                path, f"checkpoint {ref!r} is not terminal and has no way out "
                "(no advance_when, pipeline outcome or on_failure)",
                "add an advance rule, or make it terminal: true", "warning"))
    return problems


# --- environment and unsupported keys ------------------------------------------------------


def _env_warnings(playbook: Playbook) -> list[Problem]:
    problems = []
    for var, keys in playbook.env_references().items():
        if var not in os.environ:
            problems.append(Problem(
                join_path("env", keys[0]),
                f"environment variable {var} is not set (used by env {', '.join(keys)})",
                f"export {var}=... before starting a call; the runtime refuses to start without it",
                "warning"))
    return problems


def unsupported_keys(playbook: Playbook) -> list[str]:
    """Paths of known superdialog keys in use that this engine does not act on (yet)."""
    found: list[str] = []
    if playbook.pronunciations:
        found.append("pronunciations")
    if playbook.multi_entity:
        found.append("multi_entity")
    if playbook.knowledge_base:
        found.append("knowledge_base")
    if playbook.legacy_continuity:
        found.append("legacy_continuity")
    if playbook.dispatch:
        found.append("dispatch")
    if playbook.policies.context != "append":
        found.append("policies.context")
    for flag in ("memory_enabled", "followup_enabled"):
        if getattr(playbook.guidelines, flag):
            found.append(f"guidelines.{flag}")
    if playbook.guidelines.supervisor:
        found.append("guidelines.supervisor")
    for key in ("director_model", "talker_model"):  # the plugin takes models as arguments
        if getattr(playbook.guidelines, key) is not None:
            found.append(f"guidelines.{key}")
    if playbook.llm is not None:  # likewise
        found.append("llm")
    if playbook.guidelines.call_type is not None:
        found.append("guidelines.call_type")
    if playbook.guidelines.gender != "neutral":  # the voice is the TTS's, chosen by the worker
        found.append("guidelines.gender")
    # policies.extended_timeout is acted on: the hard-gate ladder waits that long after the hold line.
    for path, _, cp in iter_checkpoints(playbook):
        if cp.handover:
            found.append(join_path(path, "handover"))
        if cp.strict:
            found.append(join_path(path, "strict"))
        if cp.context not in (None, "append"):
            found.append(join_path(path, "context"))
        if cp.summary_prompt:
            found.append(join_path(path, "summary_prompt"))
        if cp.uses_kb:
            found.append(join_path(path, "uses_kb"))
        if cp.entity != "caller":
            found.append(join_path(path, "entity"))
        for key, spec in cp.slots.items():
            if spec.resolve_from is not None:
                found.append(join_path(path, "slots", key, "resolve_from"))
    for index, interrupt in enumerate(playbook.interrupts):
        if interrupt.judge == "event":
            found.append(join_path("interrupts", index, "judge"))
        if interrupt.resume:
            found.append(join_path("interrupts", index, "resume"))
    for index, tool in enumerate(playbook.tools):
        for key in ("tier", "compensate", "ttl_seconds", "on_expire"):
            if getattr(tool, key) is not None:
                found.append(join_path("tools", index, key))
    return found


def _unsupported_warning(playbook: Playbook) -> list[Problem]:
    found = unsupported_keys(playbook)
    if not found:
        return []
    return [Problem("", "known superdialog keys this engine does not act on yet are ignored: "
                    + ", ".join(found), "remove them to silence this warning", "warning")]


__all__ = ["exits", "iter_checkpoints", "unsupported_keys", "validate_playbook"]
