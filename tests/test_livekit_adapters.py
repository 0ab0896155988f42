"""The LiveKit LLM → DirectorModel/TalkerModel adapters, against a fake OpenAI-compatible server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from livekit.plugins import openai
from superdialog_core.roles.models import DirectorRequest, TalkerRequest

from superdialog_livekit.adapters import (
    LiveKitDirector,
    LiveKitTalker,
    UsageTally,
    chat_context,
    current_usage,
)
from tests.fake_openai_server import FakeOpenAIServer, RawToolArguments, tool_names

SCHEMA = {
    "type": "object",
    "properties": {
        "slots": {"type": "object", "properties": {"party_size": {"type": "integer"}}},
        "advance": {"type": ["string", "null"], "enum": ["booking.confirm", None]},
    },
}


def _request(**kw: Any) -> DirectorRequest:
    base: dict[str, Any] = {
        "messages": [{"role": "system", "content": "Decide."}, {"role": "user", "content": "four of us"}],
        "schema": SCHEMA, "tool_name": "record_verdict"}
    base.update(kw)
    return DirectorRequest(**base)


def _llm(server: FakeOpenAIServer) -> openai.LLM:
    return openai.LLM(model="fake-model", base_url=server.base_url, api_key="test")


async def test_director_forced_tool_call_returns_arguments_as_dict() -> None:
    verdict = {"slots": {"party_size": 4}, "advance": "booking.confirm"}
    async with FakeOpenAIServer(director=[verdict]) as server:
        calls = []
        director = LiveKitDirector(_llm(server), on_call=calls.append)
        result = await director.decide(_request())
    assert result == verdict
    body = server.director_requests[0]
    assert tool_names(body) == ["record_verdict"]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "record_verdict"}}
    assert body["tools"][0]["function"]["parameters"] == SCHEMA
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert calls and calls[0].answered_with == "tool_call" and calls[0].latency_ms >= 0
    assert calls[0].usage is not None and calls[0].usage.prompt_tokens == 50


async def test_director_plain_json_text_answer_is_returned_as_text() -> None:
    fenced = '```json\n{"slots": {"party_size": 2}}\n```'
    async with FakeOpenAIServer(director=[fenced]) as server:
        director = LiveKitDirector(_llm(server))
        result = await director.decide(_request())
    assert result == fenced
    assert director.calls[-1].answered_with == "text"


async def test_director_unparseable_tool_arguments_are_returned_raw() -> None:
    async with FakeOpenAIServer(director=[RawToolArguments('{"slots": {"party_size": 4')]) as server:
        director = LiveKitDirector(_llm(server))
        result = await director.decide(_request())
    assert result == '{"slots": {"party_size": 4'  # the engine's parser reports it and retries once
    assert director.calls[-1].answered_with == "tool_call"


async def test_director_names_the_requested_tool() -> None:
    async with FakeOpenAIServer(director=[{"slots": {}}]) as server:
        director = LiveKitDirector(_llm(server))
        result = await director.decide(_request(tool_name="custom_verdict"))
    assert result == {"slots": {}}
    assert server.director_requests[0]["tool_choice"]["function"]["name"] == "custom_verdict"


async def test_director_transport_error_raises_without_retry() -> None:
    async with FakeOpenAIServer() as server:
        port = server.port
    director = LiveKitDirector(openai.LLM(model="m", base_url=f"http://127.0.0.1:{port}/v1", api_key="t"))
    with pytest.raises(Exception) as info:
        await director.decide(_request())
    assert "attempt" in str(info.value) or "connection" in str(info.value).lower()


async def test_talker_streams_text_deltas_and_tallies_usage() -> None:
    async with FakeOpenAIServer(talker=["Hello there, how many of you?"]) as server:
        talker = LiveKitTalker(_llm(server))
        tally = UsageTally()
        token = current_usage.set(tally)
        try:
            pieces = [p async for p in talker.speak(TalkerRequest(
                messages=[{"role": "system", "content": "Be brief."}], purpose="reply", spoke_from_version=3))]
        finally:
            current_usage.reset(token)
    assert "".join(pieces) == "Hello there, how many of you?"
    assert len(pieces) > 1  # streamed, not one blob
    assert tally.completion_tokens == 6 and tally.segments == 1
    assert "tools" not in server.talker_requests[0]


async def test_talker_cancellation_closes_the_http_stream() -> None:
    async with FakeOpenAIServer(talker=[" ".join(f"w{i}" for i in range(50))], token_delay=0.02) as server:
        talker = LiveKitTalker(_llm(server))
        got: list[str] = []
        first = asyncio.Event()

        async def consume() -> None:
            request = TalkerRequest(messages=[{"role": "user", "content": "hi"}], purpose="opening",
                                    spoke_from_version=1)
            async for piece in talker.speak(request):
                got.append(piece)
                first.set()

        task = asyncio.create_task(consume())
        # Cancel once streaming has begun (not after a fixed sleep: a loaded machine may take
        # longer than any sleep to deliver the first token).
        await asyncio.wait_for(first.wait(), timeout=30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.1)
    assert 0 < len(got) < 50
    assert server.disconnects == 1


def test_chat_context_rejects_unknown_roles() -> None:
    ctx = chat_context([{"role": "system", "content": "a"}, {"role": "assistant", "content": "b"}])
    assert [m.role for m in ctx.items] == ["system", "assistant"]
    with pytest.raises(ValueError, match=r"messages\[0\]\.role"):
        chat_context([{"role": "function", "content": "x"}])
    # This turn's host function calls and results become LiveKit's own items.
    ctx = chat_context([{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "name": "hours", "arguments": '{"day":"Monday"}'}]},
        {"role": "tool", "tool_call_id": "c1", "name": "hours", "content": "9 to 5"}])
    assert [i.type for i in ctx.items] == ["function_call", "function_call_output"]
    assert ctx.items[0].arguments == '{"day":"Monday"}' and ctx.items[1].output == "9 to 5"


def test_adapters_satisfy_the_engine_protocols() -> None:
    from superdialog_core.roles.models import DirectorModel, TalkerModel

    model = openai.LLM(model="m", base_url="http://127.0.0.1:1/v1", api_key="k")
    assert isinstance(LiveKitDirector(model), DirectorModel)
    assert isinstance(LiveKitTalker(model), TalkerModel)


def test_chat_context_reuses_the_previous_requests_messages_and_keeps_ids_unique() -> None:
    cache: dict = {}
    first = [{"role": "system", "content": "persona v1"}, {"role": "user", "content": "yes"},
             {"role": "assistant", "content": "For two?"}]
    a = chat_context(first, cache)
    second = [{"role": "system", "content": "persona v2"}, *first[1:],
              {"role": "user", "content": "yes"}]
    b = chat_context(second, cache)
    assert [m.text_content for m in b.items] == ["persona v2", "yes", "For two?", "yes"]
    assert b.items[1] is a.items[1] and b.items[2] is a.items[2]  # not built again
    assert b.items[0] is not a.items[0]
    assert len({m.id for m in b.items}) == 4  # the repeated "yes" is its own item
    assert len(cache) == 3 and ("system", "persona v1") not in cache  # only this request's
    assert [m.id for m in chat_context(second, cache).items] == [m.id for m in b.items]
    assert chat_context(second).items[1] is not b.items[1]  # without a cache: all new
