"""What the plugin relies on from the Runtime: turns wait for a start still loading the store,
and ``time_up()`` (the host's ``max_call_seconds`` timer) is a hard stop."""

from __future__ import annotations

import asyncio
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from superdialog_core import MemoryStore, Playbook, Runtime, ScriptedDirector, ScriptedTalker
from superdialog_core import events as ev

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=ZoneInfo("UTC"))

PLAYBOOK = """
policies:
  max_call_seconds: 600
journeys:
  shop:
    checkpoints:
      - id: ask
        goal: Know the party size
        slots:
          party: {type: int, required: true, description: how many people}
        advance_when:
          - {id: got, when: "slots.party", judge: expr, to: shop.done}
      - id: done
        terminal: true
        outcome: ok
        say_verbatim: "Thank you, goodbye."
"""


class SlowStore(MemoryStore):
    """A store whose load takes ``delay`` seconds (a remote Redis, a slow disk)."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    async def load(self, session_id: str):  # type: ignore[no-untyped-def]
        await asyncio.sleep(self.delay)
        return await super().load(session_id)


def runtime(**kw: object) -> Runtime:
    return Runtime(Playbook.from_yaml(PLAYBOOK), ScriptedDirector(),
                   ScriptedTalker(["Hi, how many of you?", "Sure.", "Okay."]), now=NOW,
                   **kw)  # type: ignore[arg-type]


async def test_a_turn_waits_for_a_start_still_loading_the_store() -> None:
    rt = runtime(store=SlowStore(0.05), session_id="slow-1")
    start = asyncio.ensure_future(rt.start(speak=False))
    await asyncio.sleep(0.01)  # the start is awaiting the store: _started is set already
    turn = await rt.user_turn("two of us")
    await start
    types = [type(e) for e in rt.log]
    assert types[0] is ev.SessionStart and types.count(ev.SessionStart) == 1
    users = [e for e in rt.log if isinstance(e, ev.Utterance) and e.role == "user"]
    assert [u.text for u in users] == ["two of us"]
    assert users[0].version > rt.log[0].version and turn.checkpoint is not None
    await rt.wait_idle()


async def test_a_turn_during_a_slow_resume_continues_the_stored_log() -> None:
    store = SlowStore(0.0)
    first = runtime(store=store, session_id="slow-2")
    await first.start()
    await first.wait_idle()
    store.delay = 0.05
    again = runtime(store=store, session_id="slow-2")
    start = asyncio.ensure_future(again.start())
    await asyncio.sleep(0.01)
    await again.user_turn("two of us")
    resumed = await start
    assert resumed.text == ""  # the opening is not replayed
    assert [type(e) for e in again.log].count(ev.SessionStart) == 1
    assert again.log.version > first.log.version
    await again.wait_idle()


async def test_a_start_whose_store_failed_is_retried_by_the_next_turn() -> None:
    class Flaky(MemoryStore):
        fail = True

        async def load(self, session_id: str):  # type: ignore[no-untyped-def]
            if self.fail:
                self.fail = False
                raise ConnectionError("store down")
            return await super().load(session_id)

    rt = runtime(store=Flaky(), session_id="flaky-1")
    with pytest.raises(ConnectionError):
        await rt.start()
    turn = await rt.user_turn("two of us")
    assert isinstance(rt.log[0], ev.SessionStart) and turn.checkpoint is not None


async def test_time_up_ends_the_call_with_its_closing_line_and_outcome_timeout() -> None:
    rt = runtime()
    await rt.start()
    left = rt.seconds_left()
    assert left is not None and 599 < left <= 600
    turn = await rt.time_up()
    assert turn.ended and turn.outcome == "timeout" and "time limit" in turn.text
    assert any(isinstance(e, ev.External) and e.kind == "timer" for e in turn.events)
    again = await rt.time_up()  # already over: nothing more is said
    assert again.text == "" and rt.state.outcome == "timeout"
