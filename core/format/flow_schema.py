"""The legacy flow JSON we accept (livekit-flows' ``ConversationFlow`` plus superdialog's extras).

```json
{"name": "trattoria", "system_prompt": "You are Maya...",
 "initial_node": "greet",
 "environment_variables": {"API_BASE": "https://api.example.com", "API_KEY": "${API_KEY}"},
 "actions": [{"id": "availability", "method": "GET", "url": "{{API_BASE}}/slots?d={{date}}",
              "headers": {"Authorization": "Bearer {{API_KEY}}"}, "body_template": null,
              "timeout": 5, "store_response_as": "availability",
              "env_updates": {}, "slot_updates": {}}],
 "nodes": [{"id": "greet", "name": "Greeting", "instruction": "Greet the caller.",
            "static_text": null, "is_final": false, "max_turns": 4,
            "actions": [{"trigger_type": "on_enter", "action_id": "availability"}],
            "edges": [{"id": "wants_table", "condition": "caller wants a table",
                       "target_node_id": "collect",
                       "input_schema": {"type": "object",
                                        "properties": {"party_size": {"type": "integer"}},
                                        "required": ["party_size"]},
                       "required": null, "actions": []}]}],
 "global_edges": [{"id": "goodbye", "condition": "caller says goodbye", "target_node_id": "bye"}]}
```

Every key, alias and list form of superdialog's flow models loads (reference
superdialog-formats.md §2.1): ``global_actions`` / ``env_vars`` (aliases of ``actions`` /
``environment_variables``; the canonical key wins when both are given), env and ``headers`` as
a dict or ``[{key, value}]``, ``env_updates`` as a dict or ``[{env_key, result_path}]``, the
action ``body`` (it wins over ``body_template``), the trigger's ``trigger`` and ``id``.
``target`` is accepted for ``target_node_id``; an edge's ``required`` (when given) overrides
its ``input_schema.required``. Keys this engine does not act on yet are listed by
``inert_keys`` for one warning. A key in no superdialog model is an error with a did-you-mean.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator


class _Flow(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _pairs(value: Any, key: str, val: str, what: str) -> Any:
    """``[{key, value}]`` (superdialog's list form) as a dict; anything else unchanged."""
    if not isinstance(value, list):
        return value
    out: dict[Any, Any] = {}
    for index, item in enumerate(value):
        if not isinstance(item, dict) or key not in item or val not in item or set(item) - {key, val}:
            raise ValueError(f"{what}[{index}] must be {{{key}: ..., {val}: ...}} (got {item!r})")
        out[item[key]] = item[val]
    return out


class PropertySchema(_Flow):
    type: Literal["string", "integer", "number", "boolean", "array", "object"] = "string"
    description: str = ""
    enum: list[Any] | None = None
    format: str | None = None
    items: dict[str, Any] | None = None


class InputSchema(_Flow):
    type: Literal["object"] = "object"
    properties: dict[str, PropertySchema] = Field(default_factory=dict)
    required: list[str] = Field(default_factory=list)
    additionalProperties: bool | None = None  # JSON Schema's spelling


class ActionTrigger(_Flow):
    trigger_type: Literal["on_enter", "on_exit"] = Field(
        default="on_enter", validation_alias=AliasChoices("trigger_type", "trigger"))
    action_id: str
    id: str | None = None  # superdialog ignores it; so do we


class CompletionCriterion(_Flow):
    key: str
    description: str = ""
    required: bool = True


class ToolDefinition(_Flow):
    """superdialog's LLM-callable tool (graph engine only): loads, inert."""

    id: str
    name: str = ""
    description: str = ""
    input_schema: dict[str, Any] | None = None
    handler_id: str | None = None
    type: Literal["python", "http", "mcp"] = "python"
    url: str | None = None
    method: str | None = None
    server: str | None = None


class FlowEdge(_Flow):
    id: str = ""
    condition: str
    target_node_id: str | None = Field(default=None, validation_alias=AliasChoices("target_node_id", "target"))
    input_schema: InputSchema | None = None
    required: list[str] | None = None
    actions: list[ActionTrigger] = Field(default_factory=list)
    is_fallback: bool = False
    guard: str | None = None
    criteria: list[CompletionCriterion] | None = None

    def requires(self) -> list[str]:
        if self.required is not None:
            return list(self.required)
        return list(self.input_schema.required) if self.input_schema else []


class FlowNode(_Flow):
    id: str
    name: str = ""
    instruction: str | None = None
    static_text: str | None = None
    is_final: bool = False
    max_turns: int | None = Field(default=None, ge=1)
    edges: list[FlowEdge] = Field(default_factory=list)
    actions: list[ActionTrigger] = Field(default_factory=list)
    node_type: Literal["final", "static", "instruction", "router"] | None = None
    auto_proceed: bool = False
    completion_criteria: list[CompletionCriterion] | None = None
    allow_skip: bool = True
    interruptible: bool = True
    tools: list[ToolDefinition] = Field(default_factory=list)
    langGraph: dict[str, Any] | None = None  # superdialog's spelling
    # Not superdialog fields, but in its example flows (it drops them silently): inert.
    flow_stage: Any = None
    response_mode: Any = None
    type: Any = None
    on_enter_actions: Any = None
    on_exit_actions: Any = None

    @field_validator("is_final", mode="before")
    @classmethod
    def _null_is_false(cls, value: Any) -> Any:
        return False if value is None else value

    @property
    def speaks(self) -> bool:
        """Conversational: it says something (or ends the call); else it only computes/routes."""
        return bool(self.instruction or self.static_text or self.is_final)


class FlowAction(_Flow):
    id: str
    name: str = ""
    description: str = ""
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "GET"
    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    body_template: str | dict[str, Any] | list[Any] | None = None
    timeout: float = Field(default=30.0, gt=0)
    store_response_as: str | None = None
    env_updates: dict[str, str] = Field(default_factory=dict)
    slot_updates: dict[str, str] = Field(default_factory=dict)
    run_once: bool = False
    condition: str | None = None
    string_fields: list[str] = Field(default_factory=list)
    identifier: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _body_alias(cls, data: Any) -> Any:
        # superdialog: `body` is the alias of body_template and wins when both are given.
        if isinstance(data, dict) and "body" in data:
            data = dict(data)
            data["body_template"] = data.pop("body")
        return data

    @field_validator("headers", mode="before")
    @classmethod
    def _headers_list(cls, value: Any) -> Any:
        return _pairs(value, "key", "value", "headers")

    @field_validator("env_updates", mode="before")
    @classmethod
    def _env_updates_list(cls, value: Any) -> Any:
        return _pairs(value, "env_key", "result_path", "env_updates")

    @field_validator("body_template", mode="before")
    @classmethod
    def _empty_body(cls, value: Any) -> Any:
        return None if value == "" else value


ALIASES = {"global_actions": "actions", "env_vars": "environment_variables"}


class ConversationFlow(_Flow):
    name: str = ""
    system_prompt: str = ""
    initial_node: str
    nodes: list[FlowNode] = Field(min_length=1)
    actions: list[FlowAction] = Field(default_factory=list)
    environment_variables: dict[str, str] = Field(default_factory=dict)
    global_edges: list[FlowEdge] = Field(default_factory=list)
    agent_language: str = ""
    agent_tone: str = ""
    agent_gender: str = ""
    tools: list[ToolDefinition] = Field(default_factory=list)
    objective: str = ""

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for alias, key in ALIASES.items():
            if alias in data:
                value = data.pop(alias)
                data.setdefault(key, value)  # as superdialog: the canonical key wins
        return data

    @field_validator("environment_variables", mode="before")
    @classmethod
    def _env_list(cls, value: Any) -> Any:
        return _pairs(value, "key", "value", "environment_variables")


# Keys accepted but not acted on yet, with their defaults (anything else set is named once).
_INERT = {
    "node": {"node_type": None, "auto_proceed": False, "completion_criteria": None, "allow_skip": True,
             "interruptible": True, "tools": [], "langGraph": None, "flow_stage": None,
             "response_mode": None, "type": None, "on_enter_actions": None, "on_exit_actions": None},
    "edge": {"is_fallback": False, "guard": None, "criteria": None},
    "action": {"run_once": False, "condition": None, "string_fields": [], "identifier": None},
    "top": {"tools": [], "objective": ""},
}


def inert_keys(flow: ConversationFlow) -> dict[str, int]:
    """``{"nodes[].node_type": 136, ...}``: keys set to something this engine ignores (yet)."""
    counts: dict[str, int] = {}

    def count(where: str, model: BaseModel, keys: dict[str, Any]) -> None:
        given = model.model_fields_set
        for key, default in keys.items():  # in a fixed order: the warning reads the same each load
            if key in given and getattr(model, key) != default:
                counts[where + key] = counts.get(where + key, 0) + 1

    count("", flow, _INERT["top"])
    for node in flow.nodes:
        count("nodes[].", node, _INERT["node"])
        for edge in node.edges:
            count("nodes[].edges[].", edge, _INERT["edge"])
    for edge in flow.global_edges:
        count("global_edges[].", edge, _INERT["edge"])
    for action in flow.actions:
        count("actions[].", action, _INERT["action"])
    return counts


__all__ = [
    "ALIASES",
    "ActionTrigger",
    "CompletionCriterion",
    "ConversationFlow",
    "FlowAction",
    "FlowEdge",
    "FlowNode",
    "InputSchema",
    "PropertySchema",
    "ToolDefinition",
    "inert_keys",
]
