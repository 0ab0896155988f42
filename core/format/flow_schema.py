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

``target`` is accepted for ``target_node_id``; an edge's ``required`` (when given) overrides its
``input_schema.required``. ``env_updates``/``slot_updates`` on actions and ``global_edges`` are
superdialog's extras. Unknown keys are errors with a did-you-mean hint, as in every format.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field


class _Flow(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


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


class ActionTrigger(_Flow):
    trigger_type: Literal["on_enter", "on_exit"] = "on_enter"
    action_id: str


class FlowEdge(_Flow):
    id: str = ""
    condition: str
    target_node_id: str | None = Field(default=None, validation_alias=AliasChoices("target_node_id", "target"))
    input_schema: InputSchema | None = None
    required: list[str] | None = None
    actions: list[ActionTrigger] = Field(default_factory=list)

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


class ConversationFlow(_Flow):
    name: str = ""
    system_prompt: str = ""
    initial_node: str
    nodes: list[FlowNode] = Field(min_length=1)
    actions: list[FlowAction] = Field(default_factory=list)
    environment_variables: dict[str, str] = Field(default_factory=dict)
    global_edges: list[FlowEdge] = Field(default_factory=list)


__all__ = [
    "ActionTrigger",
    "ConversationFlow",
    "FlowAction",
    "FlowEdge",
    "FlowNode",
    "InputSchema",
    "PropertySchema",
]
