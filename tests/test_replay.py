"""Replay (SPEC §12): re-run the Director over a logged scripted call and diff its decisions.

The call is real: ``Runtime`` with the scripted models of ``tests/fixtures/scripts/replay_call.yaml``
(a refusal, a blocked advance, a read-back confirmation). Its JSONL log is replayed against
the same playbook and Director (no drift), a changed Director (drift at the changed turn), and
a changed playbook (drift, and the log named as written by another version).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from superdialog_core import EventLog, Playbook, Runtime, ScriptedDirector
from superdialog_core import events as ev
from superdialog_core.format.yaml12 import load_yaml
from superdialog_core.roles.scripts import (
    load_script,
    scripted_caller,
    scripted_director,
    scripted_talker,
)
from superdialog_core.turn.replay import describe, logged_decisions, replay

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PLAYBOOK = FIXTURES / "replay_booking.yaml"
CALL = FIXTURES / "scripts" / "replay_call.yaml"
NOW = datetime(2026, 12, 1, 10, 0, tzinfo=ZoneInfo("Europe/Rome"))  # a Tuesday


async def logged_call(playbook: Playbook | None = None, director: Any = None) -> EventLog:
    """Play the scripted call through a real Runtime; its log, read back from JSONL."""
    rt = Runtime(playbook or Playbook.load(PLAYBOOK), director or scripted_director(CALL),
                 scripted_talker(CALL), now=NOW, barrier_timeout=2.0)
    await rt.start()
    caller = scripted_caller(CALL)
    while (line := caller.next_line()) is not None:
        await rt.user_turn(line)
    await rt.wait_idle()
    assert rt.state.ended and rt.state.outcome == "booked", rt.state
    return EventLog.from_jsonl(rt.log.to_jsonl())


def changed_playbook(edit: Any) -> Playbook:
    doc = load_yaml(PLAYBOOK.read_text())
    edit(doc)
    return Playbook.from_dict(doc)


def step(doc: dict[str, Any], cp_id: str) -> dict[str, Any]:
    return next(cp for cp in doc["journeys"]["table"]["checkpoints"] if cp["id"] == cp_id)


async def test_the_logged_decisions_are_read_per_user_turn() -> None:
    log = await logged_call()
    decided, skipped = logged_decisions(log)
    assert skipped == []
    turns = [decided[v] for v in sorted(decided)]
    assert len(turns) == 5
    assert turns[0].advance == {"to": "table.collect", "by": "director", "rule_id": "table.greet.0"}
    # "lots" is no int: refused; the advance it asked for is blocked by requires.
    assert set(turns[1].refused) == {"party_size"} and turns[1].slots == {}
    assert turns[1].blocked == "table.name" and turns[1].advance is None
    assert turns[2].slots == {
        "party_size": {"value": 4, "status": "accepted", "by": "director"},
        "day": {"value": "2026-12-04", "status": "accepted", "by": "director"},
    }
    # A hard gate: the name stays provisional until the read-back is affirmed.
    assert turns[3].slots == {"guest": {"value": "Rossi", "status": "provisional", "by": "director"}}
    assert turns[4].slots == {"guest": {"value": "Rossi", "status": "confirmed", "by": "caller"}}
    assert turns[4].advance is not None and turns[4].advance["to"] == "table.done"


async def test_replay_with_the_same_director_and_playbook_shows_no_drift() -> None:
    log = await logged_call()
    playbook = Playbook.load(PLAYBOOK)
    report = await replay(log, playbook, scripted_director(CALL))
    assert report.same_playbook
    assert [t.drift for t in report.turns] == [[], [], [], [], []]
    assert not report.has_drift
    for turn in report.turns:
        assert turn.replayed.compared() == turn.logged.compared()
    assert [t.checkpoint for t in report.turns] == [
        "table.greet", "table.collect", "table.collect", "table.name", "table.name"]
    assert report.turns[1].text == "for lots of us"


async def test_replay_is_stable() -> None:
    log = await logged_call()
    playbook = Playbook.load(PLAYBOOK)
    first = await replay(log, playbook, scripted_director(CALL))
    second = await replay(log, playbook, scripted_director(CALL))
    assert first.to_json() == second.to_json()
    assert "latency" not in first.to_json()


async def test_a_changed_director_drifts_at_the_turn_it_decides_differently() -> None:
    log = await logged_call()
    verdicts = load_script(CALL, "director")
    verdicts[2] = {"slots": {"party_size": 5, "day": "2026-12-04"}, "advance": "table.name"}
    report = await replay(log, Playbook.load(PLAYBOOK), ScriptedDirector(verdicts))
    assert [t.index for t in report.drifted] == [3]
    turn = report.drifted[0]
    assert turn.drift == ["slots"]
    assert turn.logged.slots["party_size"]["value"] == 4
    assert turn.replayed.slots["party_size"]["value"] == 5
    assert ("slots.party_size", "slot party_size = 5 (accepted)") in describe(turn.replayed)


async def test_a_director_that_stops_advancing_drifts_on_the_advance() -> None:
    log = await logged_call()
    verdicts = load_script(CALL, "director")
    verdicts[0] = {}
    report = await replay(log, Playbook.load(PLAYBOOK), ScriptedDirector(verdicts))
    assert report.drifted[0].index == 1 and report.drifted[0].drift == ["advance"]
    assert report.drifted[0].replayed.advance is None


async def test_a_failing_director_is_drift_and_says_so() -> None:
    log = await logged_call()
    verdicts: list[Any] = load_script(CALL, "director")
    verdicts[3] = RuntimeError("model down")
    report = await replay(log, Playbook.load(PLAYBOOK), ScriptedDirector(verdicts))
    turn = next(t for t in report.turns if t.index == 4)
    assert turn.drift == ["slots"]
    assert turn.replayed.verdict is None
    assert turn.replayed.degraded == ["RuntimeError: model down"]
    assert ("verdict", "no verdict (the Director failed)") in describe(turn.replayed)


async def test_unparseable_output_is_retried_once_like_the_runtime() -> None:
    log = await logged_call()
    verdicts: list[Any] = load_script(CALL, "director")
    verdicts.insert(0, "I think they want a table")  # no JSON: the retry takes the next item
    report = await replay(log, Playbook.load(PLAYBOOK), ScriptedDirector(verdicts))
    assert report.turns[0].drift == []
    assert report.turns[0].replayed.verdict is not None


async def test_the_playbook_s_verdict_cap_applies_as_in_the_runtime() -> None:
    """An answer over ``policies.caps.verdict_bytes`` was refused by the call and retried:
    replay refuses it too, so the retry takes the same next verdict and nothing drifts."""
    playbook = changed_playbook(lambda doc: doc.setdefault("policies", {}).update(
        caps={"verdict_bytes": 1024}))

    def director() -> ScriptedDirector:
        verdicts: list[Any] = load_script(CALL, "director")
        verdicts.insert(0, '{"advance": "table.collect"}' + " " * 2000)  # over the 1 KiB cap
        return ScriptedDirector(verdicts)

    log = await logged_call(playbook, director())
    report = await replay(log, playbook, director())
    assert report.turns[0].logged.verdict is not None
    assert [turn.drift for turn in report.turns] == [[]] * 5


async def test_a_changed_playbook_drifts_and_the_log_is_named_as_older() -> None:
    log = await logged_call()

    def soften(doc: dict[str, Any]) -> None:
        step(doc, "name")["gate"] = "soft"  # the name no longer needs a read-back

    report = await replay(log, changed_playbook(soften), scripted_director(CALL))
    assert not report.same_playbook
    assert report.log_hash is not None and report.log_hash != report.playbook_hash
    # Turn 4 writes the name accepted now; turn 5 is judged on the state the call had (the
    # name provisional, as logged), so its confirmation still lands as it did.
    assert [t.index for t in report.drifted] == [4]
    assert report.drifted[0].replayed.slots["guest"]["status"] == "accepted"
    assert report.turns[4].replayed.slots["guest"]["status"] == "confirmed"
    data = report.to_dict()
    assert data["playbook"]["same"] is False and data["drifted_turns"] == [4]


async def test_a_playbook_without_the_logged_checkpoint_cannot_replay_that_turn() -> None:
    log = await logged_call()

    def rename(doc: dict[str, Any]) -> None:
        step(doc, "name")["id"] = "who"
        step(doc, "collect")["advance_when"][0]["to"] = "table.who"

    report = await replay(log, changed_playbook(rename), scripted_director(CALL))
    broken = [t for t in report.turns if t.drift == ["error"]]
    assert [t.index for t in broken] == [4, 5]
    assert "table.name" in (broken[0].replayed.error or "")
    assert describe(broken[0].replayed)[0][1].startswith("cannot replay: ")


async def test_turns_after_the_end_are_skipped_not_replayed() -> None:
    rt = Runtime(Playbook.load(PLAYBOOK), ScriptedDirector([{"interrupt": "goodbye"}]),
                 scripted_talker(CALL), now=NOW)
    await rt.start()
    await rt.user_turn("sorry, wrong number, bye")
    await rt.user_turn("hello?")
    await rt.wait_idle()
    log = EventLog.from_jsonl(rt.log.to_jsonl())
    report = await replay(log, Playbook.load(PLAYBOOK), ScriptedDirector([{"interrupt": "goodbye"}]))
    assert len(report.turns) == 1 and report.turns[0].drift == []
    assert report.turns[0].logged.advance == {"to": "table.bye", "by": "interrupt",
                                              "rule_id": "interrupt:goodbye"}
    assert [s["text"] for s in report.skipped] == ["hello?"]
    assert report.skipped[0]["reason"] == "after the call ended"


async def test_a_turn_the_director_failed_in_the_log_is_replayed_too() -> None:
    rt = Runtime(Playbook.load(PLAYBOOK), ScriptedDirector([RuntimeError("down")]),
                 scripted_talker(CALL), now=NOW)
    await rt.start()
    await rt.user_turn("I want a table")
    await rt.wait_idle()
    log = EventLog.from_jsonl(rt.log.to_jsonl())
    decided, _ = logged_decisions(log)
    (decision,) = decided.values()
    assert decision.verdict is None and decision.degraded == ["RuntimeError: down"]
    same = await replay(log, Playbook.load(PLAYBOOK), ScriptedDirector([RuntimeError("down")]))
    assert not same.has_drift
    better = await replay(log, Playbook.load(PLAYBOOK), ScriptedDirector([{"advance": "table.collect"}]))
    assert better.turns[0].drift == ["advance"]


def test_replay_needs_a_caller_utterance() -> None:
    from superdialog_core.turn.replay import replay_turn

    log = EventLog([])
    log.append(ev.SessionStart(session_id="s", playbook_hash="x", anchor=NOW.isoformat()))
    with pytest.raises(ValueError, match="not a caller utterance"):
        import asyncio

        asyncio.run(replay_turn(log, Playbook.load(PLAYBOOK), ScriptedDirector([]), 1))


async def test_a_log_whose_verdicts_do_not_name_their_utterance_still_replays() -> None:
    import json

    lines = []
    for line in (await logged_call()).to_jsonl().splitlines():
        event = json.loads(line)
        if event["type"] == "verdict":
            event.pop("user_version", None)  # as an older writer logged it
        lines.append(json.dumps(event))
    log = EventLog.from_jsonl("\n".join(lines) + "\n")
    report = await replay(log, Playbook.load(PLAYBOOK), scripted_director(CALL))
    assert len(report.turns) == 5 and not report.has_drift
    assert report.turns[4].logged.advance is not None
