"""Pydantic models of the full playbook format (SPEC §2), plus lookups the engine uses per turn.

Field names and meanings follow superdialog 0.3 (reference/superdialog-engine.md §1.2-1.11) so
existing playbooks load unchanged; our additions are marked in the docstrings. Unknown keys are
errors (``extra="forbid"``). Loading, validation and compilation live in ``loader.py`` and
``validate.py``; the compiled expressions and templates are attached to these models as private
attributes at load, so a turn never parses or compiles anything.
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from . import loader

SlotType = Literal[
    "str", "int", "float", "bool", "date", "time", "datetime", "enum", "array", "object",
    "phone", "email",
]
Gate = Literal["soft", "hard"]

ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_default=False)


class ResolveFrom(_Model):
    """superdialog's candidate resolution (known, not acted on yet: loads with a warning)."""

    result: str
    list_field: str = "items"
    name_field: str = "name"
    id_field: str = "id"


class SlotSpec(_Model):
    """A typed value the Director extracts. ``confirm`` and the phone/email/datetime types are ours."""

    type: SlotType = "str"
    required: bool = False
    values: list[Any] | None = None
    description: str = ""
    authoritative: bool = False
    invalidates: list[str] = Field(default_factory=list)
    gate: Gate | None = None
    confirm: bool = False
    allow_empty: bool = False
    future_only: bool = False
    anchor: Literal["inherit", "off", "shadow", "enforce"] = "inherit"
    resolve_from: ResolveFrom | None = None
    default: Any = None  # ours, call_start only: the value when the dispatch gives none


class AdvanceRule(_Model):
    """An outcome gate. ``id`` is ours (default ``<journey>.<checkpoint>.<index>``)."""

    id: str | None = None
    when: str
    judge: Literal["llm", "expr"] = "llm"
    to: str
    requires: list[str] = Field(default_factory=list)
    set_: dict[str, Any] = Field(default_factory=dict, alias="set")

    _expr: Any = PrivateAttr(default=None)  # compiled ``when`` for judge: expr


class Checkpoint(_Model):
    """One step of a journey. ``interruptible`` is ours (for its verbatim line)."""

    id: str
    goal: str = ""
    entity: str = "caller"
    slots: dict[str, SlotSpec] = Field(default_factory=dict)
    guidance: str = ""
    say_verbatim: str | None = None
    never_say: list[str] = Field(default_factory=list)
    exit_say: str = ""
    advance_when: list[AdvanceRule] = Field(default_factory=list)
    gate: Gate = "soft"
    auto: bool = False
    strict: bool = False
    handover: bool = False
    pipeline: str | None = None
    on_enter: list[str] = Field(default_factory=list)
    on_failure: str | None = None
    terminal: bool = False
    outcome: str | None = None
    turn_budget: int | None = Field(default=None, ge=1)
    uses_kb: bool | None = None
    context: Literal["append", "reset", "reset_with_summary"] | None = None
    summary_prompt: str = ""
    interruptible: bool = True

    _guidance: Any = PrivateAttr(default=None)
    _say_verbatim: Any = PrivateAttr(default=None)
    _exit_say: Any = PrivateAttr(default=None)


class Journey(_Model):
    checkpoints: list[Checkpoint] = Field(min_length=1)


class InterruptSpec(_Model):
    """A global jump judged by the Director. ``kind`` is ours: no substring matching on "bye"."""

    id: str
    when: str
    judge: Literal["llm", "event"] = "llm"
    to: str
    resume: bool = False
    kind: Literal["goodbye", "other"] | None = None

    @model_validator(mode="after")
    def _default_kind(self) -> InterruptSpec:
        if self.kind is None:
            self.kind = "goodbye" if self.id == "goodbye" else "other"
        return self


class ToolSpec(_Model):
    """An HTTP or python tool. ``body`` is any JSON structure (typed single-expression leaves)."""

    id: str
    type: Literal["http", "python"] = "http"
    method: str = "GET"
    url: str = ""
    headers: dict[str, str] = Field(default_factory=dict)
    body: Any = None
    store_response_as: str | None = None
    env_updates: dict[str, str] = Field(default_factory=dict)
    slot_updates: dict[str, str] = Field(default_factory=dict)
    run_once: bool = False
    when: str | None = None
    timeout: float = 30.0
    args: dict[str, SlotSpec] = Field(default_factory=dict)
    tier: Literal["reversible", "compensable", "irreversible"] | None = None
    compensate: str | None = None
    ttl_seconds: float | None = None
    on_expire: str | None = None

    _when: Any = PrivateAttr(default=None)
    _url: Any = PrivateAttr(default=None)
    _headers: Any = PrivateAttr(default=None)
    _body: Any = PrivateAttr(default=None)


class RetrySpec(_Model):
    """Retry a failed step: ``retry`` attempts after the first (at most 10), then ``on_exhaust``."""

    retry: int = Field(default=0, ge=0, le=10)
    on_exhaust: str | None = None


StepOutcome = str | RetrySpec


class PipelineStep(_Model):
    """One tool of a pipeline; ``on`` maps ``ok``/``failed``/``http_<code>`` to an outcome."""

    tool: str
    on: dict[str, StepOutcome] = Field(default_factory=dict)


class PipelineSpec(_Model):
    id: str
    steps: list[PipelineStep] = Field(min_length=1)


class HandlerSpec(_Model):
    """Runs ``pipeline`` when an external event ``<kind>.<name>`` (``on``) arrives."""

    id: str
    on: str
    pipeline: str


class MiddlewareSpec(_Model):
    """On ``on_status`` from a tool: run ``refresh_with``, then replay the call."""

    on_status: int = 401
    refresh_with: str
    then: Literal["replay"] = "replay"


class DispatchEntry(_Model):
    intent: str
    to: str
    requires: list[str] = Field(default_factory=list)


class SilencePolicy(_Model):
    max_prompts: int = Field(default=2, ge=0)
    prompts: list[str] = Field(default_factory=list)
    then: str = ""

    _prompts: list[Any] = PrivateAttr(default_factory=list)  # compiled speech templates


MODEL_FAILURE_LINE = (
    "I'm sorry, we're having technical trouble on our side and can't continue this call right "
    "now."
)


class ModelFailurePolicy(_Model):
    """``policies.model_failure``: what a call does when a model role keeps failing.

    After ``after`` call-level failures of one role in a row (Talker or Director: an error, a
    timeout, output unparseable after the retry), the call speaks ``line`` and moves to
    ``then`` (a checkpoint ref; a terminal one ends the call with its outcome). Without
    ``then`` the call ends with outcome ``model_failure``.
    """

    after: int = Field(default=3, ge=1)
    line: str = MODEL_FAILURE_LINE
    then: str = ""


DEFAULT_GOODBYE_WORDS = [
    "bye", "goodbye", "good bye", "bye bye", "see you", "talk to you later", "have to go",
    "got to go", "gotta go", "that's all", "hang up",
]


class StoreFailurePolicy(_Model):
    """When the log store stops answering: failed appends are retried with backoff while the
    call goes on; after ``after`` failed attempts in a row (about 16 s with the default) the
    call speaks ``line`` and ends (outcome ``error``, reason ``store_failure``)."""

    after: int = Field(default=8, ge=1)
    line: str = ("I'm sorry, we're having technical trouble and can't continue this call right "
                 "now. Please call again later. Goodbye.")
class Caps(_Model):
    """Bounds on what input may cost (SPEC §13); the defaults are far above a voice call's."""

    utterance_bytes: int = Field(default=64 * 1024, ge=1024)
    """A caller utterance is logged whole up to this many bytes (UTF-8); beyond, its prefix,
    its length and its sha256."""
    model_chars: int = Field(default=4000, ge=100)
    """The models (Director, Talker) see at most this many characters of one utterance."""
    verdict_bytes: int = Field(default=64 * 1024, ge=1024)
    """A longer Director answer is not parsed: a ``degraded`` event and one retry."""


class Policies(_Model):
    """Conversation policies. From ``phone_region`` on, the fields are ours."""

    silence: SilencePolicy | None = None
    model_failure: ModelFailurePolicy | None = None
    context: Literal["append", "reset", "reset_with_summary"] = "append"
    hold_timeout: float = Field(default=4.0, gt=0)
    extended_timeout: float = Field(default=0.0, ge=0)
    filler: str | None = None
    hold_line: str | None = None
    recovery_line: str | None = None
    phone_region: str | None = None
    allow_hosts: list[str] = Field(default_factory=list)
    goodbye_words: list[str] = Field(default_factory=lambda: list(DEFAULT_GOODBYE_WORDS))
    start_failure_line: str = "I'm sorry, something went wrong on our side. Please call again later. Goodbye."
    max_call_seconds: float | None = Field(default=None, gt=0)
    log_retention_days: int | None = Field(default=None, ge=1)
    store_failure: StoreFailurePolicy = Field(default_factory=StoreFailurePolicy)
    caps: Caps = Field(default_factory=Caps)

    @field_validator("allow_hosts")
    @classmethod
    def _ports_are_numbers(cls, hosts: list[str]) -> list[str]:
        for entry in hosts:
            text = entry.strip()
            port = text.rpartition("]:")[2] if text.startswith("[") and "]:" in text else (
                text.split(":")[1] if text.count(":") == 1 else None)
            if port is not None and (not port.isdigit() or not 1 <= int(port) <= 65535):
                raise ValueError(
                    f"allow_hosts entry {entry!r}: write host or host:port with a port from 1 "
                    "to 65535 ([::1]:8080 for an IPv6 address)")
        return hosts


class GuidelineConfig(_Model):
    channel: Literal["voice", "text"] = "voice"
    tone: Literal["professional", "casual"] = "professional"
    language: str | list[str] = "en"
    call_type: Literal["sales", "support", "booking"] | None = None
    timezone: str = "UTC"
    memory_enabled: bool = False
    followup_enabled: bool = False
    gender: Literal["male", "female", "neutral"] = "neutral"
    director_model: str | None = None
    talker_model: str | None = None
    supervisor: bool | None = None


class ModelRef(_Model):
    provider: str
    model: str


class LLMConfig(_Model):
    provider: str
    model: str
    director: ModelRef | None = None


class Playbook(_Model):
    """A validated playbook: the full format, whichever format it was written in.

    Build one with ``Playbook.load(path)``, ``from_yaml``, ``from_json`` or ``from_dict``; these
    detect the full, simple and legacy-flow formats, validate everything at once and compile
    every expression and template (raising ``PlaybookError`` with every problem).
    """

    name: str = ""
    persona: str = ""
    journeys: dict[str, Journey] = Field(min_length=1)
    initial: str | None = None
    call_start: dict[str, SlotSpec] = Field(default_factory=dict)
    dispatch: list[DispatchEntry] = Field(default_factory=list)
    tools: list[ToolSpec] = Field(default_factory=list)
    pipelines: list[PipelineSpec] = Field(default_factory=list)
    handlers: list[HandlerSpec] = Field(default_factory=list)
    interrupts: list[InterruptSpec] = Field(default_factory=list)
    policies: Policies = Field(default_factory=Policies)
    middleware: MiddlewareSpec | None = None
    env: dict[str, str] = Field(default_factory=dict)
    views: dict[str, str] = Field(default_factory=dict)
    knowledge_base: str = ""
    guidelines: GuidelineConfig = Field(default_factory=GuidelineConfig)
    llm: LLMConfig | None = None
    multi_entity: bool = False
    pronunciations: list[Any] = Field(default_factory=list)
    legacy_continuity: bool = False

    # Built at construction (cheap lookups for every turn).
    _checkpoints: dict[str, Checkpoint] = PrivateAttr(default_factory=dict)
    _slot_owner: dict[str, str] = PrivateAttr(default_factory=dict)
    _tools: dict[str, ToolSpec] = PrivateAttr(default_factory=dict)
    _pipelines: dict[str, PipelineSpec] = PrivateAttr(default_factory=dict)
    _interrupts: dict[str, InterruptSpec] = PrivateAttr(default_factory=dict)
    # Filled by the loader.
    _views: dict[str, Any] = PrivateAttr(default_factory=dict)
    _warnings: list[Any] = PrivateAttr(default_factory=list)  # Problem(severity="warning")
    _coverage: list[Any] | None = PrivateAttr(default=None)  # legacy-flow coverage report
    _source_path: str | None = PrivateAttr(default=None)
    _gate_defaulted: list[str] = PrivateAttr(default_factory=list)

    def __eq__(self, other: object) -> bool:
        # Compiled private attributes differ between loads; equality is about the document.
        if not isinstance(other, Playbook):
            return NotImplemented
        return self.model_dump() == other.model_dump()

    __hash__ = None  # type: ignore[assignment]

    @property
    def warnings(self) -> list[Any]:
        """Warnings found at load (unsupported keys, unreachable checkpoints, unset ${VAR}s)."""
        return self._warnings

    @property
    def coverage(self) -> list[Any] | None:
        """For a compiled legacy flow: a ``CoverageEntry`` ``{source, became, mapped, note}``
        per node, edge and action (None for the other formats)."""
        return self._coverage

    @property
    def coverage_gaps(self) -> list[Any] | None:
        """The coverage entries that did not fully map (empty when everything did)."""
        return None if self._coverage is None else [e for e in self._coverage if not e.mapped]

    @property
    def gate_note(self) -> str | None:
        """A note for ``validate`` (never a warning): checkpoints the author wrote without
        ``gate:`` are soft here and hard in superdialog (SPEC §2.2)."""
        refs = self._gate_defaulted
        if not refs:
            return None
        shown = ", ".join(refs[:3]) + (f" and {len(refs) - 3} more" if len(refs) > 3 else "")
        return (f"{len(refs)} checkpoint(s) without gate: ({shown}) are soft here and hard in "
                "superdialog; write gate: hard where a value must be confirmed before moving on")

    @property
    def source_path(self) -> str | None:
        return self._source_path

    @model_validator(mode="after")
    def _index(self) -> Playbook:
        for journey_name, journey in self.journeys.items():
            for cp in journey.checkpoints:
                ref = f"{journey_name}.{cp.id}"
                self._checkpoints.setdefault(ref, cp)
                for index, rule in enumerate(cp.advance_when):
                    if rule.id is None:
                        rule.id = f"{ref}.{index}"
                for key in cp.slots:
                    self._slot_owner.setdefault(key, ref)
        for tool in self.tools:
            self._tools.setdefault(tool.id, tool)
        for pipeline in self.pipelines:
            self._pipelines.setdefault(pipeline.id, pipeline)
        for interrupt in self.interrupts:
            self._interrupts.setdefault(interrupt.id, interrupt)
        return self

    # --- loading (loader.py; the class passes itself, so the loader never imports this module)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, strict: bool = False) -> Playbook:
        """Load a playbook file (YAML or JSON; full, simple or legacy-flow format).

        ``strict``: the template findings superdialog renders as empty (an undeclared slot,
        env in speech, a bare name) are errors instead of warnings."""
        return loader.load_path(cls, path, strict=strict)

    @classmethod
    def from_yaml(cls, text: str, *, source: str | None = None) -> Playbook:
        """Load a playbook from YAML text (any of the three formats)."""
        return loader.load_text(cls, text, fmt="yaml", source=source)

    @classmethod
    def from_json(cls, text: str, *, source: str | None = None) -> Playbook:
        """Load a playbook from JSON text (any of the three formats)."""
        return loader.load_text(cls, text, fmt="json", source=source)

    @classmethod
    def from_dict(cls, doc: dict[str, Any], *, source: str | None = None) -> Playbook:
        """Load a playbook from a parsed document (any of the three formats)."""
        return loader.load_document(cls, doc, source=source)

    def to_yaml(self) -> str:
        """The full format as YAML; ``Playbook.from_yaml(p.to_yaml()) == p``."""
        return loader.dump_yaml(self)

    # --- lookups ---------------------------------------------------------------------
    # These run on every turn. Private attributes are read from ``__pydantic_private__``
    # directly: pydantic's ``__getattr__`` path for them costs microseconds per read.

    @property
    def checkpoints(self) -> dict[str, Checkpoint]:
        """Every checkpoint by ref (``journey.id``), in document order."""
        return self.__pydantic_private__["_checkpoints"]

    def checkpoint(self, ref: str) -> Checkpoint:
        return self.__pydantic_private__["_checkpoints"][ref]

    @property
    def initial_ref(self) -> str:
        return self.initial or next(iter(self.__pydantic_private__["_checkpoints"]))

    def tool(self, tool_id: str) -> ToolSpec:
        return self.__pydantic_private__["_tools"][tool_id]

    def pipeline(self, pipeline_id: str) -> PipelineSpec:
        return self.__pydantic_private__["_pipelines"][pipeline_id]

    def interrupt(self, interrupt_id: str) -> InterruptSpec | None:
        return self.__pydantic_private__["_interrupts"].get(interrupt_id)

    def slot_spec(self, key: str) -> SlotSpec | None:
        """The declaration of a slot: its first checkpoint declaration, else ``call_start``."""
        owner = self.__pydantic_private__["_slot_owner"].get(key)
        if owner is not None:
            return self.__pydantic_private__["_checkpoints"][owner].slots[key]
        return self.call_start.get(key)

    def slot_owner(self, key: str) -> str | None:
        """Ref of the checkpoint that declares ``key`` first (None for call-start/undeclared)."""
        return self.__pydantic_private__["_slot_owner"].get(key)

    def effective_gate(self, key: str) -> Gate:
        """The slot's own gate, else the gate of the checkpoint that declares it (SPEC §4.2)."""
        spec = self.slot_spec(key)
        if spec is not None and spec.gate is not None:
            return spec.gate
        owner = self.__pydantic_private__["_slot_owner"].get(key)
        return self.__pydantic_private__["_checkpoints"][owner].gate if owner else "soft"

    def needs_confirmation(self, key: str) -> bool:
        """Director writes of this slot stay provisional until a read-back is affirmed."""
        spec = self.slot_spec(key)
        if spec is None or key in self.call_start:
            return False
        return spec.confirm or self.effective_gate(key) == "hard"

    def declared_slots(self) -> set[str]:
        """Names ``slots.<name>`` may read: checkpoint slots, call-start, rule ``set`` keys,
        tool ``slot_updates`` keys and the built-in ``error_context``."""
        names = set(self.__pydantic_private__["_slot_owner"]) | set(self.call_start) | {"error_context"}
        for cp in self.__pydantic_private__["_checkpoints"].values():
            for rule in cp.advance_when:
                names.update(rule.set_)
        for tool in self.tools:
            names.update(tool.slot_updates)
        return names

    def env_references(self) -> dict[str, list[str]]:
        """``${VAR}`` references in ``env``: variable → env keys that use it."""
        refs: dict[str, list[str]] = {}
        for key, value in self.env.items():
            for var in ENV_REF.findall(value):
                refs.setdefault(var, []).append(key)
        return refs


__all__ = [
    "MODEL_FAILURE_LINE",
    "AdvanceRule",
    "Checkpoint",
    "DispatchEntry",
    "GuidelineConfig",
    "HandlerSpec",
    "InterruptSpec",
    "Journey",
    "LLMConfig",
    "MiddlewareSpec",
    "ModelFailurePolicy",
    "PipelineSpec",
    "PipelineStep",
    "Playbook",
    "Policies",
    "RetrySpec",
    "SilencePolicy",
    "SlotSpec",
    "ToolSpec",
]
