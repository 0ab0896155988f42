"""Regression tests for superdialog 0.3's bugs (reference/superdialog-engine.md §9).

Each test drives the Runtime the way the bug was observed and fails on the buggy behaviour:
items 1-7 (speech integrity and gating), 11 (invalidates), 12 (note queue), 14 (verdict
validation), 18 (strict tool templates), 19 (handler payloads) and 21 (pipeline quirks).
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from zoneinfo import ZoneInfo

import httpx
import pytest
from loopback import LoopbackServer, Reply
from superdialog_core import Playbook, PlaybookError, Runtime, ScriptedDirector, ScriptedTalker
from superdialog_core import events as ev

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=ZoneInfo("UTC"))


def rt_for(yaml: str, director: ScriptedDirector, talker: ScriptedTalker, **kw: object) -> Runtime:
    return Runtime(Playbook.from_yaml(yaml), director, talker, now=NOW, **kw)  # type: ignore[arg-type]


def spoken(rt: Runtime) -> list[ev.Utterance]:
    return [e for e in rt.log if isinstance(e, ev.Utterance) and e.role == "assistant"]


def turn_speech(events: list[ev.Event]) -> list[str]:
    return [e.text for e in events if isinstance(e, ev.Utterance) and e.role == "assistant"]


async def stream(rt: Runtime, text: str) -> list[str]:
    return [chunk async for chunk in rt.stream_turn(text)]


BOOKING = """
journeys:
  b:
    checkpoints:
      - id: collect
        goal: Know party size and name
        slots:
          party: {type: int, required: true}
          name: {type: str}
        advance_when:
          - {id: to_note, when: the caller asks for a note, to: b.noted}
          - {id: finish, when: the caller is done, to: b.done}
      - id: noted
        say_verbatim: "I've noted that."
        goal: Ask whether anything else is needed
        advance_when:
          - {id: fin, when: the caller is done, to: b.done}
      - id: confirm
        gate: hard
        goal: Confirm
        advance_when:
          - {id: yes_done, when: the caller confirms, to: b.done}
      - id: done
        terminal: true
        outcome: booked
        say_verbatim: "You're all set. See you soon!"
"""


# --- 1. a stale-chunk cut must not be logged as spoken ------------------------------------


async def test_bug1_reply_after_a_fast_director_is_heard_and_logged_exactly() -> None:
    director = ScriptedDirector([{"slots": {"party": 4}}])  # lands before the first token
    talker = ScriptedTalker(["Hi.", "Lovely! What name should I use?"], first_token_delay=0.05)
    rt = rt_for(BOOKING, director, talker)
    await rt.start()
    chunks = await stream(rt, "We are four")
    turn = rt.last_turn
    assert "".join(chunks) == "Lovely! What name should I use?"  # the caller hears it
    assert turn_speech(turn.events) == ["Lovely! What name should I use?"]  # logged == heard
    assert rt.state.slots["party"].value == 4


# --- 2. speech heard before a move is logged, not suppressed ------------------------------


async def test_bug2_soft_gate_speech_streamed_before_the_move_stays_in_log_and_text() -> None:
    director = ScriptedDirector([{"advance": "b.done"}], delay=0.05)
    rt = rt_for(BOOKING, director, ScriptedTalker(["Hi.", "Sure, thank you."]))
    await rt.start()
    chunks = await stream(rt, "that's all")
    assert "".join(chunks) == "Sure, thank you. You're all set. See you soon!"
    assert rt.last_turn.text == "".join(chunks)
    assert turn_speech(rt.last_turn.events) == ["Sure, thank you.", "You're all set. See you soon!"]


# --- 3. a verbatim line is streamed once, never twice -------------------------------------


async def test_bug3_hard_gate_move_into_a_verbatim_terminal_streams_it_once() -> None:
    yaml = BOOKING.replace("journeys:", "initial: b.confirm\njourneys:")
    director = ScriptedDirector([{"advance": "b.done"}])
    talker = ScriptedTalker(["Shall I book it?", "Never spoken."])
    rt = rt_for(yaml, director, talker, barrier_timeout=5)
    await rt.start()
    chunks = await stream(rt, "yes please")
    text = "".join(chunks)
    assert text.count("You're all set. See you soon!") == 1
    assert [u.text for u in spoken(rt)].count("You're all set. See you soon!") == 1
    assert [r.purpose for r in talker.requests] == ["opening"]  # no Talker re-speaking it


# --- 4. barrier degradation is visible in the log -----------------------------------------


async def test_bug4_filler_is_logged_as_filler_with_a_degraded_event() -> None:
    yaml = BOOKING.replace("journeys:", "initial: b.confirm\njourneys:")
    director = ScriptedDirector([lambda r: asyncio.sleep(0.3, {})])
    rt = rt_for(yaml, director, ScriptedTalker(["Hi.", "Could you confirm?"]),
                barrier_timeout=0.02, hold_timeout=5)
    await rt.start()
    chunks = await stream(rt, "hmm")
    filler = [u for u in spoken(rt) if u.filler]
    assert [u.text for u in filler] == ["One moment, let me check that."]
    assert filler[0].text in "".join(chunks)
    assert any(isinstance(e, ev.Degraded) and e.component == "barrier" for e in rt.last_turn.events)


# --- 5. what the log claims was said was handed to the host -------------------------------


async def test_bug5_silence_close_is_returned_and_the_auto_intro_is_streamed() -> None:
    yaml = """
policies:
  silence: {max_prompts: 1, prompts: ["Still there?"], then: m.bye}
journeys:
  m:
    checkpoints:
      - id: intro
        auto: true
        say_verbatim: "Hello, this call is recorded."
        advance_when: [{when: always, to: m.ask}]
      - id: ask
        goal: Ask how to help
      - id: bye
        terminal: true
        outcome: no_answer
        say_verbatim: "Goodbye for now."
"""
    talker = ScriptedTalker(["never used"])
    rt = rt_for(yaml, ScriptedDirector(), talker)
    opening = [chunk async for chunk in rt.stream_start()]
    assert "".join(opening) == "Hello, this call is recorded."  # not dropped
    assert turn_speech(rt.last_turn.events) == ["Hello, this call is recorded."]
    assert (await rt.external("silence", "away")).text == "Still there?"
    closing = await rt.external("silence", "away")
    assert closing.text == "Goodbye for now." and closing.ended
    assert spoken(rt)[-1].text == "Goodbye for now."


# --- 6. entering a verbatim checkpoint speaks it now, not next turn -----------------------


async def test_bug6_verbatim_of_a_checkpoint_entered_mid_turn_is_spoken_in_that_turn() -> None:
    director = ScriptedDirector([{"advance": "b.noted"}, {}])
    talker = ScriptedTalker(["Hi.", "Sure.", "Anything else?"])
    rt = rt_for(BOOKING, director, talker)
    await rt.start()
    turn = await rt.user_turn("please note that I need a high chair")
    assert turn.text == "Sure. I've noted that."
    later = await rt.user_turn("hmm")
    assert later.text == "Anything else?"  # once per entry: later turns speak from the goal
    assert [u.text for u in spoken(rt)].count("I've noted that.") == 1


# --- 7. soft by default; a hard gate has a confirmation path ------------------------------


async def test_bug7_default_gate_is_soft_and_a_hard_gate_confirms_by_read_back() -> None:
    slow = ScriptedDirector([lambda r: asyncio.sleep(0.3, {})])
    rt = rt_for(BOOKING, slow, ScriptedTalker(["Hi.", "Right away."]), barrier_timeout=0.01)
    await rt.start()
    assert (await rt.user_turn("hello")).text == "Right away."  # no barrier, no filler

    yaml = """
journeys:
  v:
    checkpoints:
      - id: code
        gate: hard
        goal: Get and confirm the member code
        slots:
          code: {type: str, required: true}
        advance_when:
          - {id: ok, when: the caller confirmed the code, to: v.done, requires: [code]}
      - id: done
        terminal: true
        outcome: verified
        say_verbatim: Thanks, you're verified.
"""
    director = ScriptedDirector([
        {"slots": {"code": "AB12"}, "advance": "v.done"},  # blocked: provisional at a hard gate
        {"confirm": ["code"], "advance": "v.done"},
    ])
    talker = ScriptedTalker(["What's your member code?", "That's A B 1 2, right?"])
    rt = rt_for(yaml, director, talker, barrier_timeout=5)
    await rt.start()
    first = await rt.user_turn("it's AB12")
    assert rt.state.slots["code"].status == "provisional" and not first.ended
    assert first.text == "That's A B 1 2, right?"  # the read-back, spoken from the fresh state
    second = await rt.user_turn("yes")
    assert second.ended and second.outcome == "verified"
    assert rt.state.slots["code"].status == "confirmed"


# --- 11. invalidates fires only on a change -----------------------------------------------


async def test_bug11_invalidates_does_not_fire_on_the_first_write() -> None:
    yaml = """
journeys:
  r:
    checkpoints:
      - id: ask
        goal: Day and time
        slots:
          time: {type: time}
          day: {type: date, invalidates: [time]}
"""
    director = ScriptedDirector([{"slots": {"time": "19:00"}}, {"slots": {"day": "2026-12-02"}},
                                 {"slots": {"day": "2026-12-03"}}])
    rt = rt_for(yaml, director, ScriptedTalker(["Hi.", "Okay."]))
    await rt.start()
    await rt.user_turn("at seven pm")
    await rt.user_turn("on Wednesday")
    assert rt.state.slots["time"].value == "19:00"  # first write of day: time survives
    await rt.user_turn("no, Thursday")
    assert "time" not in rt.state.slots  # a changed day clears time
    clear = [e for e in rt.log if isinstance(e, ev.SlotClear)]
    assert [c.key for c in clear] == ["time"]


# --- 12. notes queue; none overwrites another ---------------------------------------------


async def test_bug12_several_notes_in_one_turn_all_reach_the_next_render() -> None:
    yaml = BOOKING.replace("- {id: finish, when: the caller is done, to: b.done}",
                           "- {id: finish, when: the caller is done, to: b.done, requires: [name]}")
    director = ScriptedDirector([{"advance": "b.done", "note": "Caller sounds rushed."}])
    talker = ScriptedTalker(["Hi.", "Okay.", "And your name?"])
    rt = rt_for(yaml, director, talker)
    await rt.start()
    await rt.user_turn("that's it")
    notes = [n.text for n in rt.state.pending_notes]
    assert len(notes) == 2 and "Caller sounds rushed." in notes
    await rt.user_turn("hm?")
    system = talker.requests[-1].messages[0]["content"]
    assert all(note in system for note in notes)
    assert not rt.state.pending_notes  # consumed by that render


# --- 14. a malformed verdict is audited, and the rest applies -----------------------------


async def test_bug14_non_object_slots_is_degraded_and_the_rest_applies() -> None:
    yaml = BOOKING.replace("name: {type: str}", "name: {type: str}\n          seat: {type: enum, values: [inside, terrace]}")
    director = ScriptedDirector([{"slots": "party=4", "note": "keep it short"},
                                 {"slots": {"seat": "garden", "party": 3}}])
    rt = rt_for(yaml, director, ScriptedTalker(["Hi.", "Okay."]))
    await rt.start()
    first = await rt.user_turn("four")
    assert any(isinstance(e, ev.Degraded) and "slots" in e.detail for e in first.events)
    assert [n.text for n in rt.state.pending_notes] == ["keep it short"]
    second = await rt.user_turn("garden, three of us")
    refused = [e for e in second.events if isinstance(e, ev.SlotRefused)]
    assert [r.key for r in refused] == ["seat"]  # an invalid enum value leaves an audit event
    assert rt.state.slots["party"].value == 3


# --- 18. strict tool templates, typed bodies ----------------------------------------------


async def test_bug18_missing_template_value_refuses_the_call_and_bodies_stay_typed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    yaml = """
env: {BASE: "${SD_BUG_BASE}"}
policies: {allow_hosts: ["127.0.0.1"]}
journeys:
  t:
    checkpoints:
      - id: ask
        slots:
          party: {type: int}
          day: {type: date}
        advance_when:
          - {id: go, when: "slots.party", judge: expr, to: t.hold}
      - id: hold
        pipeline: place_hold
        advance_when:
          - {id: held, when: "pipeline.ok", judge: expr, to: t.done}
          - {id: nope, when: "pipeline.failed", judge: expr, to: t.failed}
      - {id: done, terminal: true, outcome: held, say_verbatim: Held.}
      - {id: failed, terminal: true, outcome: failed, say_verbatim: Could not hold.}
tools:
  - id: check
    url: "{{ env.BASE }}/avail?day={{ slots.day }}"
  - id: hold
    method: POST
    url: "{{ env.BASE }}/holds"
    body: {party: "{{ slots.party }}", day: "{{ slots.day }}"}
pipelines:
  - id: place_hold
    steps:
      - {tool: hold, on: {ok: continue}}
      - {tool: check, on: {ok: continue}}
"""
    async with httpx.AsyncClient(trust_env=False) as client:
        with LoopbackServer() as server:
            server.route("POST", "/holds", Reply(201, json={}))
            server.route("GET", "/avail", Reply(200, json={}))
            monkeypatch.setenv("SD_BUG_BASE", server.base_url)
            rt = rt_for(yaml, ScriptedDirector([{"slots": {"party": 4}}]),
                        ScriptedTalker(["Hi.", "Okay."]), http_client=client)
            await rt.start()
            turn = await rt.user_turn("four of us")
            assert [r.path for r in server.requests] == ["/holds"]  # /avail?day= never sent
            assert server.requests[0].json == {"party": 4, "day": None}  # typed; unset optional null
            failed = [e for e in rt.log if isinstance(e, ev.ToolResult) and e.tool == "check"]
            assert len(failed) == 1 and not failed[0].ok and "day" in failed[0].error
            assert turn.outcome == "failed"


# --- 19. webhook payloads reach the handler's tools; its move is spoken -------------------


async def test_bug19_webhook_payload_reaches_the_pipeline_and_the_route_is_spoken() -> None:
    yaml = BOOKING + """
tools:
  - {id: note_payment, type: python, store_response_as: payment}
pipelines:
  - id: paid
    steps: [{tool: note_payment, on: {ok: b.done}}]
handlers:
  - {id: payment, on: webhook.paid, pipeline: paid}
"""
    got: list[dict] = []
    rt = rt_for(yaml, ScriptedDirector(), ScriptedTalker(["Hi."]),
                python_tools={"note_payment": lambda args: got.append(dict(args)) or {"ok": 1}})
    await rt.start()
    turn = await rt.external("webhook", "paid", {"order": "o-9", "amount": 12})
    assert got == [{"order": "o-9", "amount": 12}]
    assert turn.text == "You're all set. See you soon!" and turn.ended
    call = next(e for e in rt.log if isinstance(e, ev.ToolCall))
    assert call.args.get("order") == "o-9" or "o-9" in str(call.args)


# --- 21. pipeline quirks ------------------------------------------------------------------


async def test_bug21_retry_under_ok_never_retries_a_success_and_writes_are_attributed() -> None:
    base = """
journeys:
  p:
    checkpoints:
      - id: run
        pipeline: flow
        advance_when:
          - {id: fine, when: "pipeline.ok", judge: expr, to: p.done, set: {stage: finished}}
          - {id: bad, when: "pipeline.failed", judge: expr, to: p.failed}
      - {id: done, terminal: true, outcome: ok}
      - {id: failed, terminal: true, outcome: failed}
tools:
  - {id: first, type: python}
  - {id: second, type: python}
pipelines:
  - id: flow
    steps:
      - {tool: first, on: {ok: continue}}
      - {tool: second, on: {failed: {retry: 1, on_exhaust: null}}}
"""
    # A retry under ok would repeat a call that worked: refused at load, never run.
    with pytest.raises(PlaybookError, match="retry"):
        Playbook.from_yaml(base.replace("{ok: continue}", "{ok: {retry: 3}}"))

    calls: list[str] = []

    def first(args: dict) -> dict:
        calls.append("first")
        return {}

    def second(args: dict) -> dict:
        calls.append("second")
        raise RuntimeError("down")

    tools = {"first": first, "second": second}
    rt = rt_for(base, ScriptedDirector(), ScriptedTalker(["Sorry about that."]), python_tools=tools)
    await rt.start()
    assert calls == ["first", "second", "second"]  # the failure retried once, then exhausted
    assert rt.state.outcome == "failed"
    error = rt.state.slots["error_context"]
    assert (error.value, error.by) == ("flow:second", "tool")  # not "director"

    ok = rt_for(base.replace("{tool: second, on: {failed: {retry: 1, on_exhaust: null}}}",
                             "{tool: first, on: {ok: continue}}"),
                ScriptedDirector(), ScriptedTalker(["Done."]), python_tools=tools)
    await ok.start()
    stage = ok.state.slots["stage"]
    assert (stage.value, stage.by) == ("finished", "rule")  # a rule's set, not "director"
