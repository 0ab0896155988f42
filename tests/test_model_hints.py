"""ModelHints: what the adapters send to a model marked for JSON verdicts and short replies.

Against the fake OpenAI-compatible server (no model): a marked Director asks with
``response_format`` (json_object + the llama.cpp-safe schema), ``max_tokens`` and temperature 0
and no tools, and returns the text for the engine's parser; a marked Talker sends
``max_tokens``; an unmarked model is asked exactly as before (forced tool call, no bound).
"""

from __future__ import annotations

from typing import Any

from livekit.plugins import openai
from superdialog_core.roles.director import parse_verdict
from superdialog_core.roles.models import DirectorRequest, TalkerRequest

from superdialog_livekit.adapters import LiveKitDirector, LiveKitTalker, ModelHints, model_hints
from superdialog_livekit.llama_schema import llama_safe_schema
from tests.fake_openai_server import FakeOpenAIServer

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "slots": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 200},
            "day": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
        }, "additionalProperties": False},
        "advance": {"enum": ["a.next", None]},
        "note": {"type": ["string", "null"], "maxLength": 200},
    },
    "additionalProperties": False,
}
HINTS = ModelHints(json_verdicts=True, talker_max_tokens=60, director_max_tokens=128,
                   timeout=30.0, max_string_length=40)


def _model(server: FakeOpenAIServer, hints: ModelHints | None) -> openai.LLM:
    model = openai.LLM(model="fake", base_url=server.base_url, api_key="x")
    if hints is not None:
        model.superdialog_hints = hints  # type: ignore[attr-defined]
    return model


def _director_request() -> DirectorRequest:
    return DirectorRequest(messages=[{"role": "system", "content": "decide"},
                                     {"role": "user", "content": "caller: hi"}], schema=SCHEMA)


async def test_marked_director_asks_for_json_text_with_the_safe_schema() -> None:
    answer = '{"slots": {"name": "Ann"}, "advance": "a.next", "note": null}'
    async with FakeOpenAIServer(talker=[answer]) as server:
        director = LiveKitDirector(_model(server, HINTS))
        raw = await director.decide(_director_request())
    assert isinstance(raw, str)
    assert parse_verdict(raw)["advance"] == "a.next"
    assert director.calls[-1].answered_with == "json"
    [body] = server.requests
    assert "tools" not in body and "tool_choice" not in body
    assert body["response_format"] == {
        "type": "json_object", "schema": llama_safe_schema(SCHEMA, max_length=40)}
    sent = body["response_format"]["schema"]["properties"]
    assert sent["note"] == {"anyOf": [{"type": "string", "maxLength": 40}, {"type": "null"}]}
    assert sent["slots"]["properties"]["day"]["pattern"] == "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
    assert body["max_tokens"] == 128
    assert body["temperature"] == 0.0
    assert "max_completion_tokens" not in body  # llama.cpp's server ignores it


async def test_marked_talker_sends_max_tokens() -> None:
    async with FakeOpenAIServer(talker=["Hello there."]) as server:
        talker = LiveKitTalker(_model(server, HINTS))
        request = TalkerRequest(messages=[{"role": "system", "content": "speak"}],
                                purpose="reply", spoke_from_version=1)
        text = "".join([piece async for piece in talker.speak(request)])
    assert text == "Hello there."
    [body] = server.requests
    assert body["max_tokens"] == 60


async def test_unmarked_models_are_asked_as_before() -> None:
    async with FakeOpenAIServer(talker=["Hi."], director=[{"advance": "a.next"}]) as server:
        model = _model(server, None)
        assert model_hints(model) is None
        raw = await LiveKitDirector(model).decide(_director_request())
        request = TalkerRequest(messages=[{"role": "system", "content": "speak"}],
                                purpose="reply", spoke_from_version=1)
        _ = [piece async for piece in LiveKitTalker(model).speak(request)]
    assert raw == {"advance": "a.next"}
    director_body, talker_body = server.requests
    assert director_body["tool_choice"] == {"type": "function", "function": {"name": "record_verdict"}}
    assert "response_format" not in director_body and "max_tokens" not in director_body
    assert "max_tokens" not in talker_body


def test_local_uris_mark_their_models(monkeypatch: Any) -> None:
    """local/... returns an LLM marked for JSON verdicts, one server per role (no real server)."""
    from superdialog_livekit import local, uris

    started: list[tuple[str, str]] = []

    class FakeServer:
        alias = "m"
        base_url = "http://127.0.0.1:9/v1"

    def fake_local_server(name: str, **kwargs: Any) -> FakeServer:
        started.append((name, kwargs.get("instance", "")))
        return FakeServer()

    monkeypatch.setattr(local, "local_server", fake_local_server)
    talker = uris.resolve_llm("local/smollm2-135m", role="talker")
    director = uris.llm_from_uri("local/smollm2-135m", role="director")
    plain = uris.llm_from_uri("local/smollm2-135m")
    assert started == [("smollm2-135m", "talker"), ("smollm2-135m", "director"),
                       ("smollm2-135m", "")]
    for model in (talker, director, plain):
        hints = model_hints(model)
        assert hints is not None and hints.json_verdicts
        assert hints.talker_max_tokens == uris.LOCAL_TALKER_MAX_TOKENS
        assert hints.director_max_tokens == uris.LOCAL_DIRECTOR_MAX_TOKENS
    assert model_hints(uris.llm_from_uri("http://127.0.0.1:9/v1#m")) is None
