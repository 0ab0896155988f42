"""The Runtime's turn machinery: construction errors, barge-in, the barrier ladder, Director
timeouts and retries, follow-through, post-terminal silence, policies, persistence."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from superdialog_core import (
    CallStartError,
    ConfigError,
    MemoryStore,
    Playbook,
    Runtime,
    ScriptedDirector,
    ScriptedTalker,
)
from superdialog_core import events as ev

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=ZoneInfo("UTC"))

SHOP = """
call_start:
  customer_id: {type: str, required: true}
  tier: {type: enum, values: [gold, silver]}
policies:
  silence: {max_prompts: 2, prompts: ["Are you still there?", "Hello?"], then: shop.gone}
journeys:
  shop:
    checkpoints:
      - id: ask
        goal: Know the party size
        slots:
          party: {type: int, required: true, description: how many people}
          name: {type: str}
        never_say: ["fully booked"]
        advance_when:
          - {id: got, when: "slots.party", judge: expr, to: shop.confirm}
      - id: confirm
        gate: hard
        goal: The caller confirms the party size
        advance_when:
          - {id: agreed, when: the caller confirms, to: shop.done, requires: [party]}
      - id: done
        terminal: true
        outcome: ok
        say_verbatim: "All set. Goodbye!"
      - id: gone
        terminal: true
        outcome: no_answer
        say_verbatim: "I'll let you go. Goodbye."
"""


def shop(**extra: object) -> Playbook:
    return Playbook.from_yaml(SHOP)


def runtime(director: object, talker: object, playbook: Playbook | None = None, **kw: object) -> Runtime:
    kw.setdefault("call_start", {"customer_id": "c-7"})
    return Runtime(playbook or shop(), director, talker, now=NOW, **kw)  # type: ignore[arg-type]


def of(rt: Runtime, kind: type[ev.Event]) -> list:
    return [e for e in rt.log if isinstance(e, kind)]


def spoken(rt: Runtime) -> list[ev.Utterance]:
    return [e for e in of(rt, ev.Utterance) if e.role == "assistant"]


# --- construction -------------------------------------------------------------------------


def test_unset_env_variables_are_all_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SD_TEST_BASE", raising=False)
    monkeypatch.delenv("SD_TEST_TOKEN", raising=False)
    playbook = Playbook.from_yaml(SHOP + "env:\n  BASE: '${SD_TEST_BASE}'\n  TOKEN: 'Bearer ${SD_TEST_TOKEN}'\n")
    with pytest.raises(ConfigError) as info:
        runtime(ScriptedDirector(), ScriptedTalker(), playbook)
    text = str(info.value)
    assert "SD_TEST_BASE" in text and "SD_TEST_TOKEN" in text
    assert [p.path for p in info.value.problems] == ["env.BASE", "env.TOKEN"]
    monkeypatch.setenv("SD_TEST_BASE", "http://x")
    monkeypatch.setenv("SD_TEST_TOKEN", "s3cret")
    rt = runtime(ScriptedDirector(), ScriptedTalker(), playbook)
    assert rt._env == {"BASE": "http://x", "TOKEN": "Bearer s3cret"}


async def test_call_start_errors_list_every_problem_and_write_nothing() -> None:
    with pytest.raises(CallStartError) as info:
        runtime(ScriptedDirector(), ScriptedTalker(), call_start={"custmer_id": "x", "tier": "bronze"})
    paths = sorted(p.path for p in info.value.problems)
    assert paths == ["call_start.custmer_id", "call_start.customer_id", "call_start.tier"]
    assert "did you mean 'customer_id'" in str(info.value)


async def test_call_start_values_are_confirmed_and_call_values_logged() -> None:
    rt = runtime(ScriptedDirector(), ScriptedTalker(["Hello!"]),
                 call_start={"customer_id": "c-7", "tier": " GOLD "},
                 call={"channel": "phone", "calling_number": "+4930123456"}, session_id="s-1")
    await rt.start()
    start = of(rt, ev.SessionStart)[0]
    assert start.call["channel"] == "phone" and start.call["session_id"] == "s-1"
    assert rt.session_id == "s-1"
    assert {k: (s.value, s.status, s.by) for k, s in rt.state.slots.items()} == {
        "customer_id": ("c-7", "confirmed", "call_start"),
        "tier": ("gold", "confirmed", "call_start"),
    }
    with pytest.raises(ConfigError, match="unknown call value 'chanel'"):
        runtime(ScriptedDirector(), ScriptedTalker(), call={"chanel": "web"})


def test_bad_options_are_config_errors() -> None:
    with pytest.raises(ConfigError) as info:
        runtime(object(), ScriptedTalker(), barrier_timeout=-1, director_timeout=0)
    assert {p.path for p in info.value.problems} == {"director", "barrier_timeout", "director_timeout"}


# --- opening and post-terminal ------------------------------------------------------------


async def test_opening_without_verbatim_is_one_talker_segment_and_silent_start_says_nothing() -> None:
    talker = ScriptedTalker(["Hi! How many of you are coming?"])
    rt = runtime(ScriptedDirector(), talker)
    turn = await rt.start()
    assert turn.text == "Hi! How many of you are coming?"
    assert [r.purpose for r in talker.requests] == ["opening"]
    with pytest.raises(RuntimeError, match="already"):
        await rt.start()
    quiet = runtime(ScriptedDirector(), ScriptedTalker(["never"]))
    assert (await quiet.start(speak=False)).text == ""
    assert spoken(quiet) == []


async def test_post_terminal_turns_are_logged_and_answered_with_silence() -> None:
    director = ScriptedDirector([{"slots": {"party": 2}}, {"advance": "shop.done"}])
    talker = ScriptedTalker(["Hi.", "Two, lovely.", "Two people, right?"])
    rt = runtime(director, talker)
    await rt.start()
    await rt.user_turn("two of us")
    done = await rt.user_turn("yes")
    assert done.ended and done.text == "All set. Goodbye!"
    calls = (len(director.requests), len(talker.requests))
    after = await rt.user_turn("wait, one more thing")
    assert after.text == "" and after.ended
    assert [type(e).__name__ for e in after.events] == ["Utterance"]
    assert (len(director.requests), len(talker.requests)) == calls


# --- barge-in -----------------------------------------------------------------------------


async def test_barge_in_logs_exactly_the_yielded_chunks_and_the_decision_still_lands() -> None:
    director = ScriptedDirector([{"slots": {"name": "Anna"}}], delay=0.05)
    talker = ScriptedTalker(["Hi.", "Thanks Anna, and how many people are coming?"])
    rt = runtime(director, talker)
    await rt.start()
    stream = rt.stream_turn("I'm Anna")
    chunks = [await stream.__anext__(), await stream.__anext__()]
    await stream.aclose()

    cut = spoken(rt)[-1]
    assert cut.interrupted and cut.text == "".join(chunks) == "Thanks Anna,"
    assert rt.last_turn.text == "Thanks Anna,"
    await rt.wait_idle()
    assert rt.state.slots["name"].value == "Anna"  # the shielded Director finished
    assert len(of(rt, ev.Verdict)) == 1
    # No follow-through after a barge-in, and nothing unheard was logged.
    assert len(talker.requests) == 2 and len(spoken(rt)) == 2


async def test_next_turn_waits_for_the_previous_decision() -> None:
    director = ScriptedDirector([{"slots": {"name": "Anna"}}, {"slots": {"party": 3}}], delay=0.1)
    rt = runtime(director, ScriptedTalker(["Hi.", "Sure, Anna.", "Three."]))
    await rt.start()
    stream = rt.stream_turn("I'm Anna")
    await stream.__anext__()
    await stream.aclose()
    await rt.user_turn("three of us")  # awaits the first decision before logging these words
    kinds = [(type(e).__name__, getattr(e, "key", None)) for e in rt.log]
    first_write = kinds.index(("SlotWrite", "name"))
    second_user = [i for i, e in enumerate(rt.log) if isinstance(e, ev.Utterance) and e.role == "user"][1]
    assert first_write < second_user
    assert rt.state.slots["party"].value == 3


# --- the barrier ladder -------------------------------------------------------------------


async def to_confirm(rt: Runtime) -> None:
    await rt.start()
    await rt.user_turn("two of us")
    assert rt.state.checkpoint == "shop.confirm"


async def test_ladder_rungs_are_spoken_and_logged_and_the_late_line_goes_to_on_late_line() -> None:
    late: list[str] = []

    def on_late_line(text: str) -> None:
        assert spoken(rt)[-1].text == text  # logged before the host is asked to speak it
        late.append(text)

    director = ScriptedDirector([{"slots": {"party": 2}}, lambda r: asyncio.sleep(0.6, {"advance": "shop.done"})])
    talker = ScriptedTalker(["Hi.", "Got it.", "Two people, right?"])
    rt = runtime(director, talker, barrier_timeout=0.05, hold_timeout=0.05, on_late_line=on_late_line)
    await to_confirm(rt)
    turn = await rt.user_turn("yes")
    assert turn.text == ("One moment, let me check that. I'm taking a little longer than usual, "
                         "please bear with me. Sorry, this is taking longer than it should. "
                         "I'll be right back with you.")
    rungs = [e for e in turn.events if isinstance(e, ev.Utterance) and e.role == "assistant"]
    assert [(u.filler, u.kind, u.purpose) for u in rungs] == [
        (True, "filler", "filler"), (True, "filler", "hold"), (True, "filler", "recovery")]
    assert len([e for e in turn.events if isinstance(e, ev.Degraded) and e.component == "barrier"]) == 3
    assert not turn.ended
    await rt.wait_idle()
    assert rt.state.ended and rt.state.outcome == "ok"
    assert late == ["All set. Goodbye!"]
    assert [u.text for u in spoken(rt)].count("All set. Goodbye!") == 1  # logged once


async def test_ladder_stops_at_the_filler_when_the_decision_lands_and_speaks_from_fresh_state() -> None:
    director = ScriptedDirector([{"slots": {"party": 2}}, lambda r: asyncio.sleep(0.25, {})])
    talker = ScriptedTalker(["Hi.", "Got it.", "Two people, right?", "Just to be sure: two?"])
    rt = runtime(director, talker, barrier_timeout=0.02, hold_timeout=3.0)
    await to_confirm(rt)
    turn = await rt.user_turn("hmm")
    assert turn.text == "One moment, let me check that. Just to be sure: two?"
    assert talker.requests[-1].purpose == "follow_through"
    assert talker.requests[-1].spoke_from_version > of(rt, ev.Verdict)[-1].version - 1


async def test_without_on_late_line_a_late_line_is_not_logged_and_stays_due() -> None:
    director = ScriptedDirector([{"slots": {"party": 2}}, lambda r: asyncio.sleep(0.3, {"advance": "shop.done"})])
    rt = runtime(director, ScriptedTalker(["Hi.", "Got it.", "Two?"]), barrier_timeout=0.02, hold_timeout=0.02)
    await to_confirm(rt)
    await rt.user_turn("yes")
    await rt.wait_idle()
    assert rt.state.ended
    assert "All set. Goodbye!" not in [u.text for u in spoken(rt)]


# --- the Director -------------------------------------------------------------------------


async def test_director_timeout_is_degraded_and_does_not_block_the_next_turn() -> None:
    director = ScriptedDirector([lambda r: asyncio.sleep(30, {}), {"slots": {"party": 4}}])
    rt = runtime(director, ScriptedTalker(["Hi.", "Okay.", "Four, great."]), director_timeout=0.2)
    await rt.start()
    began = time.perf_counter()
    first = await rt.user_turn("umm")
    assert time.perf_counter() - began < 5
    assert any(isinstance(e, ev.Degraded) and e.component == "director" and "director_timeout" in e.detail
               for e in first.events)
    second = await rt.user_turn("four")
    assert rt.state.slots["party"].value == 4 and second.checkpoint == "shop.confirm"


async def test_unparseable_director_output_is_retried_once_then_degraded() -> None:
    director = ScriptedDirector(["I think they said four", '```json\n{"slots": {"party": 4}}\n```',
                                 "nope", "still nope"])
    rt = runtime(director, ScriptedTalker(["Hi.", "Okay."]))
    await rt.start()
    await rt.user_turn("four of us")
    verdict = of(rt, ev.Verdict)[-1]
    assert verdict.attempts == 2 and rt.state.slots["party"].value == 4
    assert "could not be used" in director.requests[1].messages[-1]["content"]
    before = len(of(rt, ev.Verdict))
    turn = await rt.user_turn("what?")
    assert len(director.requests) == 4 and len(of(rt, ev.Verdict)) == before
    assert any(isinstance(e, ev.Degraded) and "after one retry" in e.detail for e in turn.events)


async def test_director_exception_is_degraded_and_the_talker_still_speaks() -> None:
    rt = runtime(ScriptedDirector([RuntimeError("boom")]), ScriptedTalker(["Hi.", "Sorry, how many?"]))
    await rt.start()
    turn = await rt.user_turn("hello")
    assert turn.text == "Sorry, how many?"
    assert any(isinstance(e, ev.Degraded) and "boom" in e.detail for e in turn.events)


# --- the Talker ---------------------------------------------------------------------------


async def test_talker_error_speaks_and_logs_the_recovery_line() -> None:
    rt = runtime(ScriptedDirector(), ScriptedTalker(["Hi.", ConnectionError("model down")]))
    await rt.start()
    turn = await rt.user_turn("hello")
    assert turn.text == "Sorry, could you say that again?"
    line = spoken(rt)[-1]
    assert (line.kind, line.purpose) == ("line", "recovery")
    assert any(isinstance(e, ev.Degraded) and e.component == "talker" and "model down" in e.detail
               for e in turn.events)


async def test_never_say_is_cut_from_the_stream_and_the_log() -> None:
    rt = runtime(ScriptedDirector(), ScriptedTalker(["Hi.", "Sorry, we are fully booked tonight. But tomorrow works! How many?"]))
    await rt.start()
    turn = await rt.user_turn("table tonight?")
    assert "fully booked" not in turn.text
    assert turn.text == spoken(rt)[-1].text
    assert turn.text.endswith("But tomorrow works! How many?")


async def test_steering_notes_are_consumed_by_the_next_render() -> None:
    director = ScriptedDirector([{"note": "Caller is in a hurry"}, {"note": "Still in a hurry"}])
    talker = ScriptedTalker(["Hi.", "Sure.", "Quickly then."])
    rt = runtime(director, talker)
    await rt.start()
    await rt.user_turn("quick please")
    assert [n.text for n in rt.state.pending_notes] == ["Caller is in a hurry"]
    await rt.user_turn("hurry")
    consumed = of(rt, ev.NoteConsumed)
    assert consumed and "Caller is in a hurry" in talker.requests[2].messages[0]["content"]
    assert [n.text for n in rt.state.pending_notes] == ["Still in a hurry"]


# --- policies -----------------------------------------------------------------------------


async def test_silence_prompts_then_route_and_the_closing_line_is_returned_and_logged() -> None:
    rt = runtime(ScriptedDirector(), ScriptedTalker(["Hi."]))
    await rt.start()
    first = await rt.external("silence", "user_away")
    second = await rt.external("silence", "user_away")
    assert (first.text, second.text) == ("Are you still there?", "Hello?")
    assert [u.kind for u in spoken(rt)[-2:]] == ["prompt", "prompt"]
    third = await rt.external("silence", "user_away")
    assert third.text == "I'll let you go. Goodbye." and third.ended and third.outcome == "no_answer"
    move = next(e for e in third.events if isinstance(e, ev.Advance))
    assert (move.rule_id, move.by) == ("policy:silence", "policy")
    assert spoken(rt)[-1].text == "I'll let you go. Goodbye."


async def test_turn_budget_steers_then_forces_only_to_on_failure() -> None:
    text = SHOP.replace("        never_say:", "        turn_budget: 2\n        on_failure: shop.gone\n        never_say:")
    rt = runtime(ScriptedDirector(), ScriptedTalker(["Hi.", "How many?"]), Playbook.from_yaml(text))
    await rt.start()
    await rt.user_turn("hm")
    assert not of(rt, ev.SteeringNote)
    await rt.user_turn("hmm")
    assert len(of(rt, ev.SteeringNote)) == 1  # after N turns: a steer
    await rt.user_turn("hmmm")
    assert rt.state.checkpoint == "shop.ask"
    forced = await rt.user_turn("hmmmm")  # after N+2: only to on_failure
    move = next(e for e in forced.events if isinstance(e, ev.Advance))
    assert (move.to, move.rule_id, move.by) == ("shop.gone", "policy:turn_budget", "policy")
    assert forced.ended


async def test_turn_budget_without_on_failure_never_forces_the_next_step() -> None:
    text = SHOP.replace("        never_say:", "        turn_budget: 1\n        never_say:")
    rt = runtime(ScriptedDirector(), ScriptedTalker(["Hi.", "How many?"]), Playbook.from_yaml(text))
    await rt.start()
    for _ in range(5):
        await rt.user_turn("hm")
    assert rt.state.checkpoint == "shop.ask"
    assert any(isinstance(e, ev.Degraded) and "turn_budget" in e.detail for e in rt.log)


async def test_max_call_seconds_ends_with_a_closing_line_and_outcome_timeout() -> None:
    text = SHOP.replace("policies:\n", "policies:\n  max_call_seconds: 0.2\n")
    rt = runtime(ScriptedDirector(), ScriptedTalker(["Hi.", "How many?"]), Playbook.from_yaml(text))
    await rt.start()
    assert not (await rt.user_turn("hello")).ended
    await asyncio.sleep(0.25)
    turn = await rt.user_turn("still here")
    assert turn.ended and turn.outcome == "timeout"
    assert "time limit" in turn.text and spoken(rt)[-1].text == turn.text
    assert (await rt.user_turn("hello?")).text == ""


# --- external handlers --------------------------------------------------------------------


async def test_handler_pipeline_gets_the_payload_as_args_and_its_route_is_spoken() -> None:
    text = SHOP + """
tools:
  - {id: record_payment, type: python, store_response_as: payment}
pipelines:
  - id: on_paid
    steps:
      - {tool: record_payment, on: {ok: shop.done}}
handlers:
  - {id: paid, on: webhook.payment, pipeline: on_paid}
"""
    seen: list[dict] = []

    def record_payment(args: dict, state: object) -> dict:
        seen.append(dict(args))
        return {"amount": args["amount"]}

    rt = runtime(ScriptedDirector(), ScriptedTalker(["Hi."]), Playbook.from_yaml(text),
                 python_tools={"record_payment": record_payment})
    await rt.start()
    turn = await rt.external("webhook", "payment", {"amount": 42})
    assert seen == [{"amount": 42}]
    assert turn.text == "All set. Goodbye!" and turn.ended
    quiet = await rt.external("webhook", "unknown")
    assert quiet.text == "" and isinstance(quiet.events[0], ev.External)


# --- corrections --------------------------------------------------------------------------


async def test_mark_heard_and_withdraw() -> None:
    director = ScriptedDirector([{"slots": {"party": 2}}, {"confirm": ["party"]}])
    rt = runtime(director, ScriptedTalker(["Hi there, how many?", "Two."]))
    opening = await rt.start()
    version = spoken(rt)[0].version
    rt.mark_heard(version, "Hi there")
    assert rt.state.entry(version).heard_text == "Hi there"
    with pytest.raises(ValueError, match="not an assistant utterance"):
        rt.mark_heard(1, "x")
    assert opening.text == "Hi there, how many?"
    await rt.user_turn("two")
    assert rt.state.slots["party"].status == "accepted"
    rt.withdraw("party")
    assert rt.state.slots["party"].status == "provisional"
    with pytest.raises(ValueError, match="has no value"):
        rt.withdraw("name")


# --- persistence --------------------------------------------------------------------------


async def test_store_gets_every_event_and_a_new_runtime_resumes_without_replaying() -> None:
    store = MemoryStore()
    director = ScriptedDirector([{"slots": {"name": "Anna"}}])
    rt = runtime(director, ScriptedTalker(["Hi, how many?", "Thanks."]), store=store, session_id="call-1")
    await rt.start()
    await rt.user_turn("I'm Anna")
    await rt.wait_idle()
    stored = await store.load("call-1")
    assert stored.to_jsonl() == rt.log.to_jsonl()

    talker = ScriptedTalker(["Welcome back."])
    again = runtime(ScriptedDirector([{"slots": {"party": 5}}]), talker, store=store, session_id="call-1")
    resumed = await again.start()
    assert resumed.text == "" and talker.requests == []
    assert again.state.slots["name"].value == "Anna" and again.log.version == rt.log.version
    await again.user_turn("five of us")
    await again.wait_idle()
    assert (await store.load("call-1")).version == again.log.version


async def test_a_failing_late_line_hook_is_corrected_to_heard_nothing() -> None:
    def broken(text: str) -> None:
        raise OSError("no session")

    director = ScriptedDirector([{"slots": {"party": 2}}, lambda r: asyncio.sleep(0.3, {"advance": "shop.done"})])
    rt = runtime(director, ScriptedTalker(["Hi.", "Got it.", "Two?"]), barrier_timeout=0.02,
                 hold_timeout=0.02, on_late_line=broken)
    await to_confirm(rt)
    await rt.user_turn("yes")
    await rt.wait_idle()
    line = spoken(rt)[-1]
    assert line.text == "All set. Goodbye!" and rt.state.entry(line.version).heard_text == ""
    assert any(isinstance(e, ev.Degraded) and e.component == "late_line" for e in rt.log)


async def test_on_enter_tools_run_once_per_entry_and_goodbye_routes_to_its_interrupt() -> None:
    text = SHOP.replace("        gate: hard\n", "        gate: hard\n        on_enter: [ping]\n") + """
tools:
  - {id: ping, type: python, store_response_as: ping}
interrupts:
  - {id: goodbye, when: the caller wants to end the call, to: shop.gone}
"""
    pings: list[int] = []
    rt = runtime(ScriptedDirector([{"slots": {"party": 2}}, {}, {}]),
                 ScriptedTalker(["Hi.", "Two.", "Right?"]), Playbook.from_yaml(text),
                 python_tools={"ping": lambda args: pings.append(1) or {"pong": True}})
    await to_confirm(rt)
    assert pings == [1] and rt.state.results["ping"].ok
    await rt.user_turn("hmm")
    assert pings == [1]  # once per entry, not per turn
    bye = await rt.user_turn("ok bye")  # the Director missed it; the backstop routes it
    assert bye.ended and bye.outcome == "no_answer" and bye.text == "I'll let you go. Goodbye."
    move = next(e for e in bye.events if isinstance(e, ev.Advance))
    assert (move.rule_id, move.by) == ("interrupt:goodbye", "interrupt")


async def test_a_new_turn_supersedes_a_stream_left_open() -> None:
    director = ScriptedDirector([{"slots": {"name": "Anna"}}, {"slots": {"party": 3}}], delay=0.05)
    talker = ScriptedTalker(["Hi there, welcome.", "Thanks Anna, how many are you?", "Three, great.",
                             "Three people, right?"])
    rt = runtime(director, talker)
    opening = rt.stream_start()
    assert await opening.__anext__() == "Hi"  # the caller talks over the greeting
    first = rt.stream_turn("I'm Anna")
    got = [await first.__anext__(), await first.__anext__()]
    second = await rt.user_turn("three of us")  # the first stream was never closed
    assert [u.text for u in spoken(rt)[:2]] == ["Hi", "".join(got)]
    assert all(u.interrupted for u in spoken(rt)[:2])
    assert rt.state.slots["name"].value == "Anna" and rt.state.slots["party"].value == 3
    writes = [e.key for e in rt.log if isinstance(e, ev.SlotWrite) and e.by == "director"]
    assert writes == ["name", "party"]  # decisions applied in order
    assert second.text == "Three, great. Three people, right?"
    assert [chunk async for chunk in first] == []  # the old stream stops, saying nothing more
    await opening.aclose()
    assert len(spoken(rt)) == 4


async def test_a_question_for_a_value_captured_meanwhile_gets_a_repair_note() -> None:
    director = ScriptedDirector([{"slots": {"name": "Anna"}}], delay=0.02)
    talker = ScriptedTalker(["Hi.", "Sure. And what name is it under?", "Thanks, Anna."])
    rt = runtime(director, talker)
    await rt.start()
    await rt.user_turn("a table for Anna please")
    (note,) = [n for n in rt.state.pending_notes if n.kind == "repair"]
    assert "name" in note.text and "Anna" in note.text
    await rt.user_turn("hello?")
    assert note.text in talker.requests[-1].messages[0]["content"]

    calm = runtime(ScriptedDirector([{"slots": {"name": "Anna"}}]),
                   ScriptedTalker(["Hi.", "How many people are coming?"]))
    await calm.start()
    await calm.user_turn("it's for Anna")
    assert not [n for n in calm.state.pending_notes if n.kind == "repair"]  # it asked for party


async def test_an_external_event_waits_for_the_reply_still_streaming() -> None:
    rt = runtime(ScriptedDirector(), ScriptedTalker(["Hi.", "Let me think about that for a moment."]))
    await rt.start()
    stream = rt.stream_turn("hello")
    first = await stream.__anext__()
    silence = asyncio.create_task(rt.external("silence", "user_away"))
    await asyncio.sleep(0.05)
    assert not silence.done()  # it waits instead of cutting the reply
    rest = [chunk async for chunk in stream]
    turn = await silence
    assert first + "".join(rest) == "Let me think about that for a moment."
    assert not spoken(rt)[-2].interrupted and turn.text == "Are you still there?"


async def test_cancelling_the_consumer_mid_token_logs_the_prefix_and_keeps_the_decision() -> None:
    director = ScriptedDirector([{"slots": {"name": "Bo"}}], delay=0.05)
    talker = ScriptedTalker(["Hi.", "Nice to meet you, Bo, how many are coming?"], token_delay=0.05)
    rt = runtime(director, talker)
    await rt.start()
    got: list[str] = []

    async def consume() -> None:
        async for chunk in rt.stream_turn("I'm Bo"):
            got.append(chunk)

    task = asyncio.create_task(consume())
    while len(got) < 3:
        await asyncio.sleep(0.01)
    task.cancel()  # what LiveKit does to the LLM stream on an interruption
    with pytest.raises(asyncio.CancelledError):
        await task
    await rt.wait_idle()
    cut = spoken(rt)[-1]
    assert cut.interrupted and cut.text == "".join(got)
    assert rt.state.slots["name"].value == "Bo"


async def test_a_spoken_goodbye_ends_the_call_even_when_the_director_fails() -> None:
    text = SHOP + """
interrupts:
  - {id: goodbye, when: the caller wants to end the call, to: shop.gone}
"""
    rt = runtime(ScriptedDirector([RuntimeError("model down"), RuntimeError("still down")]),
                 ScriptedTalker(["Hi.", "Okay."]), Playbook.from_yaml(text))
    await rt.start()
    assert not (await rt.user_turn("I'm thinking")).ended
    bye = await rt.user_turn("okay, bye!")
    assert bye.ended and bye.outcome == "no_answer"
    assert bye.text == "Okay. I'll let you go. Goodbye."


async def test_call_first_user_message_reads_the_callers_first_words() -> None:
    rt = runtime(ScriptedDirector(), ScriptedTalker(["Hi.", "Okay."]))
    await rt.start()
    assert rt.state.scope()["call"]["first_user_message"] is None
    await rt.user_turn("I want to book")
    await rt.user_turn("for four")
    assert rt.state.scope()["call"]["first_user_message"] == "I want to book"


async def test_a_superseded_ladder_speaks_and_logs_no_further_rungs() -> None:
    director = ScriptedDirector([{"slots": {"party": 2}}, lambda r: asyncio.sleep(0.2, {}), {}])
    rt = runtime(director, ScriptedTalker(["Hi.", "Two.", "Two, right?"]),
                 barrier_timeout=0.01, hold_timeout=0.05)
    await to_confirm(rt)
    old = rt.stream_turn("hmm")
    assert await old.__anext__() == "One moment, let me check that."
    await rt.user_turn("yes, two")  # the caller speaks over the filler
    assert [chunk async for chunk in old] == []
    rungs = [e for e in rt.log if isinstance(e, ev.Degraded) and e.component == "barrier"]
    assert len(rungs) == 1
    assert len([u for u in spoken(rt) if u.filler]) == 1


async def test_a_slow_decision_at_a_soft_gate_ends_the_reply_and_its_lines_come_late() -> None:
    text = SHOP + """
interrupts:
  - {id: goodbye, when: the caller wants to end the call, to: shop.gone}
"""
    late: list[str] = []
    director = ScriptedDirector([lambda r: asyncio.sleep(0.3, {"interrupt": "goodbye"})])
    rt = runtime(director, ScriptedTalker(["Hi.", "Of course."]), Playbook.from_yaml(text),
                 hold_timeout=0.05, on_late_line=late.append)
    await rt.start()
    turn = await rt.user_turn("I have to go now, sorry")
    assert turn.text == "Of course." and not turn.ended
    await rt.wait_idle()
    assert rt.state.ended and late == ["I'll let you go. Goodbye."]
    assert spoken(rt)[-1].text == "I'll let you go. Goodbye."


class ClosingTalker:
    """A Talker that records when each of its streams is closed (to see barge-ins stop it)."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.closed: list[str] = []

    def speak(self, request: object) -> object:
        text = self.replies.pop(0)
        return self._stream(text)

    async def _stream(self, text: str):  # type: ignore[no-untyped-def]
        try:
            for word in text.split(" "):
                await asyncio.sleep(0)
                yield word + " "
        finally:
            self.closed.append(text)


async def test_barge_in_during_the_follow_through_closes_that_talker_stream_at_once() -> None:
    talker = ClosingTalker(["Hi.", "Two, great.", "So that is two people, is that right?"])
    rt = runtime(ScriptedDirector([{"slots": {"party": 2}}]), talker)
    await rt.start()
    stream = rt.stream_turn("two of us")
    chunks: list[str] = []
    async for chunk in stream:
        chunks.append(chunk)
        if "So" in chunk:
            break
    await stream.aclose()
    assert talker.closed[-1] == "So that is two people, is that right?"  # closed now, not at GC
    follow = spoken(rt)[-1]
    assert follow.interrupted and follow.text == "So" and follow.purpose == "follow_through"
