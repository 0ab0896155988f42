"""llama_safe_schema: nullable type lists, \\d in patterns and string caps, llama.cpp-safe."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import jsonschema
import pytest
from superdialog_core import Playbook
from superdialog_core.log.state import ConversationState
from superdialog_core.roles.director import verdict_schema

from superdialog_livekit.llama_schema import llama_safe_schema

PLAYBOOK = "playbooks/dental_booking.yaml"


def _walk(schema: Any):
    if isinstance(schema, dict):
        yield schema
        for value in schema.values():
            yield from _walk(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _walk(item)


def test_nullable_enum_becomes_enum_with_null() -> None:
    out = llama_safe_schema({"type": ["string", "null"], "enum": ["a", "b"]})
    assert out == {"enum": ["a", "b", None]}


def test_nullable_enum_keeps_a_single_null() -> None:
    assert llama_safe_schema({"type": ["string", "null"], "enum": ["a", None]}) == {"enum": ["a", None]}


def test_nullable_string_becomes_any_of_with_the_constraints_in_the_typed_branch() -> None:
    out = llama_safe_schema({"type": ["string", "null"], "maxLength": 5, "description": "d"})
    assert out == {"description": "d",
                   "anyOf": [{"type": "string", "maxLength": 5, "description": "d"}, {"type": "null"}]}


def test_single_item_type_list_is_unwrapped() -> None:
    assert llama_safe_schema({"type": ["integer"]}) == {"type": "integer"}


def test_nested_schemas_are_rewritten_everywhere() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "array", "items": {"type": ["string", "null"], "enum": ["x"]}},
            "b": {"anyOf": [{"type": ["integer", "null"]}]},
        },
        "$defs": {"c": {"type": ["number", "null"]}},
    }
    out = llama_safe_schema(schema)
    assert not any(isinstance(s.get("type"), list) for s in _walk(out))
    assert out["properties"]["a"]["items"] == {"enum": ["x", None]}
    assert out["properties"]["b"]["anyOf"][0] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert out["$defs"]["c"] == {"anyOf": [{"type": "number"}, {"type": "null"}]}


def test_digit_class_in_patterns_is_spelled_out() -> None:
    out = llama_safe_schema({"type": "string", "pattern": r"^\d{4}-[\d.]{2}\.\\d$"})
    assert out["pattern"] == r"^[0-9]{4}-[0-9.]{2}\.\\d$"
    for text in ("2026-12.\\d", "1999-3.\\d"):
        assert (re.fullmatch(out["pattern"], text) is not None) == \
            (re.fullmatch(r"^\d{4}-[\d.]{2}\.\\d$", text) is not None)


def test_max_length_caps_strings_but_not_enums_or_patterns() -> None:
    schema = {"type": "object", "properties": {
        "free": {"type": "string"},
        "long": {"type": "string", "maxLength": 200},
        "short": {"type": "string", "maxLength": 10},
        "note": {"type": ["string", "null"], "maxLength": 200},
        "pick": {"type": "string", "enum": ["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]},
        "day": {"type": "string", "pattern": r"^\d$"},
    }}
    props = llama_safe_schema(schema, max_length=40)["properties"]
    assert props["free"]["maxLength"] == 40
    assert props["long"]["maxLength"] == 40
    assert props["short"]["maxLength"] == 10
    assert props["note"]["anyOf"][0]["maxLength"] == 40
    assert "maxLength" not in props["pick"]
    assert "maxLength" not in props["day"]
    assert "maxLength" not in llama_safe_schema(schema)["properties"]["free"]


def test_an_array_that_must_stay_empty_becomes_const_empty() -> None:
    out = llama_safe_schema({"type": "object", "properties": {
        "deny": {"type": "array", "maxItems": 0},
        "confirm": {"type": "array", "items": {"enum": ["a"]}, "uniqueItems": True},
    }})
    assert out["properties"]["deny"] == {"const": []}
    assert out["properties"]["confirm"] == {"type": "array", "items": {"enum": ["a"]},
                                            "uniqueItems": True}
    jsonschema.validate({"deny": []}, out)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"deny": [{"name": "John"}]}, out)


def test_input_is_not_mutated() -> None:
    schema = {"type": "object", "properties": {"n": {"type": ["string", "null"], "enum": ["a"]},
                                               "d": {"type": "string", "pattern": r"\d"}}}
    before = copy.deepcopy(schema)
    llama_safe_schema(schema, max_length=5)
    assert schema == before


@pytest.mark.parametrize("checkpoint", ["visit.greet", "visit.details", "visit.read_back"])
def test_verdict_schemas_stay_equivalent_for_valid_verdicts(checkpoint: str) -> None:
    """The Director's real per-checkpoint schemas: no type lists left, same verdicts accepted."""
    playbook = Playbook.load(PLAYBOOK)
    state = ConversationState(playbook)
    state.checkpoint = checkpoint
    schema = verdict_schema(state, playbook)
    safe = llama_safe_schema(schema)
    assert not any(isinstance(s.get("type"), list) for s in _walk(safe))
    assert json.dumps(safe)  # plain JSON, as sent in response_format
    verdicts: list[dict[str, Any]] = [
        {}, {"note": None}, {"note": "keep it short"}, {"advance": None, "interrupt": None},
    ]
    for verdict in verdicts:
        jsonschema.validate(verdict, schema)
        jsonschema.validate(verdict, safe)
    for bad in ({"note": 3}, {"advance": "nowhere"}, {"interrupt": "nope"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, safe)


def test_llama_cpp_compiles_the_verdict_grammar() -> None:
    """llama.cpp's own converter accepts every checkpoint's schema and enforces the enums."""
    grammar = pytest.importorskip("llama_cpp.llama_grammar")
    playbook = Playbook.load(PLAYBOOK)
    state = ConversationState(playbook)
    for ref in playbook.checkpoints:
        state.checkpoint = ref
        safe = llama_safe_schema(verdict_schema(state, playbook), max_length=60)
        gbnf = grammar.json_schema_to_gbnf(json.dumps(safe))
        assert "\\d" not in gbnf  # the digit class became [0-9], not the literal text "\d"
        assert 'deny-kv ::= "\\"deny\\"" space ":" space deny' in gbnf
        assert 'deny ::= "[]"' in gbnf  # no made-up items in an array that must stay empty
        grammar.LlamaGrammar.from_string(gbnf, verbose=False)
