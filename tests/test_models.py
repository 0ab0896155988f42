"""The model protocols and the scripted models that every engine test relies on (SPEC §1)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from superdialog_core import (
    DirectorModel,
    DirectorRequest,
    ScriptedDirector,
    ScriptedTalker,
    TalkerModel,
    TalkerRequest,
)
from superdialog_core.roles.models import chunk_words


def dreq(text: str = "hi") -> DirectorRequest:
    return DirectorRequest(messages=[{"role": "user", "content": text}], schema={"type": "object"})


def treq(purpose: str = "reply", version: int = 1) -> TalkerRequest:
    return TalkerRequest(messages=[{"role": "system", "content": "x"}], purpose=purpose,  # type: ignore[arg-type]
                         spoke_from_version=version)


async def collect(stream) -> list[str]:
    return [chunk async for chunk in stream]


# --- requests and protocols ----------------------------------------------------------------


def test_director_request_defaults_to_record_verdict_tool() -> None:
    assert dreq().tool_name == "record_verdict"


def test_talker_request_rejects_unknown_purpose() -> None:
    with pytest.raises(ValueError, match="purpose 'greeting'"):
        TalkerRequest(messages=[], purpose="greeting", spoke_from_version=0)  # type: ignore[arg-type]


def test_scripted_models_satisfy_the_protocols() -> None:
    assert isinstance(ScriptedDirector([]), DirectorModel)
    assert isinstance(ScriptedTalker([]), TalkerModel)
    assert not isinstance(ScriptedTalker([]), DirectorModel)
    assert not isinstance(object(), TalkerModel)


# --- ScriptedDirector -------------------------------------------------------------------------


async def test_director_pops_one_verdict_per_call_then_returns_empty() -> None:
    director = ScriptedDirector([{"slots": {"party_size": 4}}, '{"advance": "b.c"}'])
    assert await director.decide(dreq("a")) == {"slots": {"party_size": 4}}
    assert await director.decide(dreq("b")) == '{"advance": "b.c"}'
    assert director.remaining == 0
    assert await director.decide(dreq("c")) == {}
    assert await director.decide(dreq("d")) == {}
    assert [r.messages[0]["content"] for r in director.requests] == ["a", "b", "c", "d"]


async def test_director_returns_a_copy_so_the_script_stays_intact() -> None:
    verdict = {"slots": {"party_size": 4}}
    director = ScriptedDirector([verdict])
    got = await director.decide(dreq())
    assert isinstance(got, dict)
    got["slots"]["party_size"] = 9
    assert verdict == {"slots": {"party_size": 4}}


async def test_director_raises_scripted_errors_and_goes_on() -> None:
    director = ScriptedDirector([RuntimeError("model down"), TimeoutError, {"note": "ok"}])
    with pytest.raises(RuntimeError, match="model down"):
        await director.decide(dreq())
    with pytest.raises(TimeoutError):
        await director.decide(dreq())
    assert await director.decide(dreq()) == {"note": "ok"}
    assert len(director.requests) == 3


async def test_director_callable_verdicts_see_the_request() -> None:
    async def later(request: DirectorRequest) -> dict:
        return {"note": request.tool_name}

    director = ScriptedDirector([lambda r: {"note": r.messages[-1]["content"]}, later])
    assert await director.decide(dreq("table for four")) == {"note": "table for four"}
    assert await director.decide(dreq()) == {"note": "record_verdict"}


async def test_director_callable_returning_junk_is_a_clear_error() -> None:
    director = ScriptedDirector([lambda r: 42])
    with pytest.raises(TypeError, match="returned a int"):
        await director.decide(dreq())


def test_director_refuses_a_malformed_script_when_built() -> None:
    with pytest.raises(TypeError, match="item #1 is a int"):
        ScriptedDirector([{}, 3])
    with pytest.raises(ValueError, match="delay"):
        ScriptedDirector([], delay=-1)


async def test_director_delay_is_waited_and_a_timed_out_call_uses_its_verdict() -> None:
    director = ScriptedDirector([{"note": "slow"}, {"note": "next"}], delay=0.05)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(director.decide(dreq()), timeout=0.01)
    # the retry pops another verdict, as a real second model call would produce a new answer
    assert await director.decide(dreq()) == {"note": "next"}


# --- ScriptedTalker ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["Hi there!", "  leading and trailing  ", "one", "", "   ", "a\nb\tc  d"]
)
def test_chunk_words_joins_back_exactly(text: str) -> None:
    chunks = chunk_words(text)
    assert "".join(chunks) == text
    expected = len(text.split()) or (1 if text else 0)  # whitespace-only text is one chunk
    assert len(chunks) == expected


async def test_talker_streams_word_by_word() -> None:
    talker = ScriptedTalker(["Hi there!", "How many of you?"])
    assert await collect(talker.speak(treq("opening"))) == ["Hi ", "there!"]
    assert await collect(talker.speak(treq())) == ["How ", "many ", "of ", "you?"]


async def test_talker_repeats_the_last_reply_and_records_requests() -> None:
    talker = ScriptedTalker(["One.", "Two."])
    texts = ["".join(await collect(talker.speak(treq(version=v)))) for v in range(4)]
    assert texts == ["One.", "Two.", "Two.", "Two."]
    assert [r.spoke_from_version for r in talker.requests] == [0, 1, 2, 3]


async def test_talker_pops_at_call_time_not_at_first_read() -> None:
    talker = ScriptedTalker(["first", "second"])
    a = talker.speak(treq())
    b = talker.speak(treq())
    assert await collect(b) == ["second"]
    assert await collect(a) == ["first"]


async def test_talker_raises_scripted_error_at_stream_start() -> None:
    talker = ScriptedTalker([ConnectionError("llm gone"), "Back again."])
    stream = talker.speak(treq())  # the call itself does not raise: the stream does
    with pytest.raises(ConnectionError, match="llm gone"):
        await stream.__anext__()
    assert await collect(talker.speak(treq())) == ["Back ", "again."]


async def test_talker_callable_reply() -> None:
    talker = ScriptedTalker([lambda r: f"purpose {r.purpose}"])
    assert await collect(talker.speak(treq("closing"))) == ["purpose ", "closing"]


async def test_talker_with_no_replies_streams_nothing() -> None:
    talker = ScriptedTalker([])
    assert await collect(talker.speak(treq())) == []
    assert len(talker.requests) == 1


async def test_talker_delays_come_before_the_first_and_between_chunks() -> None:
    talker = ScriptedTalker(["a b c"], first_token_delay=0.05, token_delay=0.02)
    loop = asyncio.get_running_loop()
    start = loop.time()
    stamps: list[float] = []
    async for _ in talker.speak(treq()):
        stamps.append(loop.time() - start)
    assert stamps[0] >= 0.045
    assert stamps[1] - stamps[0] >= 0.015
    assert stamps[2] - stamps[1] >= 0.015


async def test_talker_first_token_delay_lets_other_tasks_run_first() -> None:
    order: list[str] = []
    talker = ScriptedTalker(["late words"], first_token_delay=0.03)

    async def speak() -> None:
        async for chunk in talker.speak(treq()):
            order.append(chunk.strip())

    async def other() -> None:
        await asyncio.sleep(0.005)
        order.append("other")

    await asyncio.gather(speak(), other())
    assert order == ["other", "late", "words"]


async def test_talker_stream_stops_on_cancel_and_on_aclose() -> None:
    talker = ScriptedTalker(["one two three four"], token_delay=0.05)
    seen: list[str] = []

    async def consume() -> None:
        async for chunk in talker.speak(treq()):
            seen.append(chunk)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.07)  # first chunk at once, second after 0.05, cancel before the third
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["one ", "two "]

    stream = talker.speak(treq())
    async with contextlib.aclosing(stream):
        assert await stream.__anext__() == "one "
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()


def test_talker_refuses_a_malformed_script_when_built() -> None:
    with pytest.raises(TypeError, match="item #0 is a dict"):
        ScriptedTalker([{"text": "hi"}])
    with pytest.raises(ValueError, match="token_delay=-1"):
        ScriptedTalker(["x"], token_delay=-1)
