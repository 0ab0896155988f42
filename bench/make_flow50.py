"""Writes bench/flow_50.json: a 50-node legacy flow of our own in superdialog's flow schema.

A courier's delivery-rescheduling line: ten stops, each with a question, a check against a
depot API and a confirmation, plus a greeting, routers, a handoff and closings. Deterministic,
so the committed file can be regenerated: ``python bench/make_flow50.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "flow_50.json"
TOPICS = ["parcel", "address", "day", "window", "door", "safe_place", "neighbour", "contact",
          "signature", "notes"]


def build() -> dict:
    nodes: list[dict] = []
    actions: list[dict] = []
    nodes.append({
        "id": "greet", "name": "Greeting", "node_type": "instruction", "interruptible": True,
        "instruction": "Greet {{customer_name|default('the caller')}} and say you can move a delivery.",
        "edges": [{"id": "start", "condition": "the caller wants to change a delivery",
                   "target_node_id": "ask_parcel"}],
    })
    for i, topic in enumerate(TOPICS):
        nxt = f"ask_{TOPICS[i + 1]}" if i + 1 < len(TOPICS) else "summary"
        actions.append({
            "id": f"check_{topic}", "name": f"Check {topic}", "description": f"Validate the {topic}",
            "method": "POST", "url": "{{DEPOT_API}}/v1/check/" + topic,
            "headers": [{"key": "Authorization", "value": "Bearer {{DEPOT_TOKEN}}"}],
            "body": {"tracking": "{{tracking_number}}", topic: "{{" + topic + "}}"},
            "timeout": 10, "store_response_as": f"{topic}_check",
            "env_updates": [{"env_key": "LAST_CHECK", "result_path": "data.id"}],
            "string_fields": ["tracking"],
        })
        nodes.append({
            "id": f"ask_{topic}", "name": f"Ask {topic}", "node_type": "instruction",
            "instruction": f"Ask for the {topic.replace('_', ' ')}. "
                           "{% if tracking_number %}Parcel {{tracking_number}}.{% endif %}",
            "max_turns": 4,
            "edges": [
                {"id": f"{topic}_given", "condition": f"the caller gave the {topic}",
                 "target_node_id": f"check_{topic}",
                 "input_schema": {"type": "object", "properties": {
                     topic: {"type": "string", "description": f"the {topic}"},
                     **({"tracking_number": {"type": "string"}} if i == 0 else {})},
                     "required": [topic]}},
                {"id": f"{topic}_skip", "condition": "the caller wants to skip this", "is_fallback": True,
                 "target_node_id": nxt},
            ],
        })
        nodes.append({
            "id": f"check_{topic}", "name": f"Check {topic}", "node_type": "router",
            "actions": [{"id": f"t_{topic}", "trigger": "on_enter", "action_id": f"check_{topic}"}],
            "edges": [
                {"id": f"{topic}_ok", "condition": f"{topic}_check.success == true",
                 "target_node_id": f"confirm_{topic}"},
                {"id": f"{topic}_bad", "condition": f"{topic}_check.success == false",
                 "target_node_id": f"retry_{topic}"},
            ],
        })
        nodes.append({
            "id": f"confirm_{topic}", "name": f"Confirm {topic}", "node_type": "static",
            "static_text": "Thanks, I have {{" + topic + "}} noted.",
            "edges": [{"id": f"{topic}_next", "condition": "the caller agrees", "target_node_id": nxt}],
        })
        nodes.append({
            "id": f"retry_{topic}", "name": f"Retry {topic}", "node_type": "instruction",
            "instruction": f"The depot did not accept the {topic}; ask again politely.",
            "edges": [{"id": f"{topic}_again", "condition": "the caller gave it again",
                       "target_node_id": f"check_{topic}",
                       "input_schema": {"type": "object", "properties": {topic: {"type": "string"}}}}],
        })
    nodes.append({"id": "summary", "name": "Summary", "node_type": "instruction",
                  "instruction": "Read back the new delivery plan for parcel {{tracking_number}}.",
                  "edges": [{"id": "done", "condition": "the caller confirms", "target_node_id": "bye"},
                            {"id": "human", "condition": "the caller wants a person",
                             "target_node_id": "handoff"}]})
    nodes.append({"id": "handoff", "name": "Handoff", "is_final": True, "node_type": "final",
                  "static_text": "I will pass you to a colleague now."})
    nodes.append({"id": "bye", "name": "Goodbye", "is_final": True, "node_type": "final",
                  "static_text": "Your delivery is rescheduled. Goodbye!"})
    nodes.append({"id": "abandon", "name": "Abandon", "is_final": True, "node_type": "final",
                  "static_text": "No problem, nothing was changed. Goodbye."})
    nodes.append({"id": "escalate", "name": "Escalate", "is_final": True, "node_type": "final",
                  "static_text": "Let me get a supervisor."})
    nodes.append({"id": "hours", "name": "Opening hours", "node_type": "static",
                  "static_text": "Our depot is open from eight to six.",
                  "edges": [{"id": "back", "condition": "the caller is done with the hours",
                             "target_node_id": "greet"}]})
    nodes.append({"id": "callback", "name": "Callback", "node_type": "instruction",
                  "instruction": "Offer a callback at a time that suits the caller.",
                  "edges": [{"id": "callback_time", "condition": "the caller gave a time",
                             "target_node_id": "callback_booked",
                             "input_schema": {"type": "object", "properties": {
                                 "callback_time": {"type": "string", "format": "time"}},
                                 "required": ["callback_time"]}}]})
    nodes.append({"id": "callback_booked", "name": "Callback booked", "is_final": True,
                  "node_type": "final", "static_text": "We will call you at {{callback_time}}."})
    nodes.append({"id": "wrong_number", "name": "Wrong number", "is_final": True,
                  "node_type": "final", "static_text": "Sorry for the trouble. Goodbye."})
    assert len(nodes) == 50, len(nodes)
    return {
        "system_prompt": "You are Robin, the courier's friendly rescheduling assistant.",
        "initial_node": "greet",
        "agent_language": "en", "agent_tone": "casual",
        "env_vars": [{"key": "DEPOT_API", "value": "https://depot.example.com"},
                     {"key": "DEPOT_TOKEN", "value": "test-token"}],
        "global_actions": actions,
        "nodes": nodes,
        "global_edges": [
            {"id": "goodbye", "condition": "the caller wants to stop", "target_node_id": "abandon"},
            {"id": "angry", "condition": "the caller is angry and asks for a manager",
             "target_node_id": "escalate"},
            {"id": "opening_hours", "condition": "the caller asks for the opening hours",
             "target_node_id": "hours"},
            {"id": "call_me_back", "condition": "the caller asks to be called back later",
             "target_node_id": "callback"},
            {"id": "not_me", "condition": "the caller says they expect no parcel",
             "target_node_id": "wrong_number"},
        ],
    }


if __name__ == "__main__":
    OUT.write_text(json.dumps(build(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")
