"""ConversationState: per-event semantics, fold equivalence and JSONL round trip (SPEC §5)."""

from __future__ import annotations

import tracemalloc
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from superdialog_core import events as ev
from superdialog_core.log.eventlog import EventLog
from superdialog_core.log.state import STATE_FIELDS, ConversationState
from superdialog_core.playbook import Playbook

DOC: dict[str, Any] = {
    "name": "state-test",
    "guidelines": {"timezone": "Europe/Paris"},
    "call_start": {"customer_id": {"type": "str"}},
    "journeys": {
        "booking": {
            "checkpoints": [
                {
                    "id": "collect",
                    "slots": {"party_size": {"type": "int"}, "name": {"type": "str"}},
                    "advance_when": [{"when": "done", "to": "booking.confirm"}],
                },
                {
                    "id": "confirm",
                    "gate": "hard",
                    "slots": {"date": {"type": "date"}},
                    "advance_when": [{"when": "yes", "to": "booking.done"}],
                },
                {"id": "done", "terminal": True, "outcome": "booked"},
            ]
        }
    },
}

SLOT_KEYS = ["party_size", "name", "date", "customer_id"]
CHECKPOINTS = ["booking.collect", "booking.confirm", "booking.done"]


@pytest.fixture(scope="module")
def playbook() -> Playbook:
    return Playbook.model_validate(DOC)


def _playbook() -> Playbook:
    return Playbook.model_validate(DOC)


class Emitter:
    """What the runtime's ``emit`` does: append to the log and apply to the state at once."""

    def __init__(self, playbook: Playbook) -> None:
        self.log = EventLog(clock=lambda: 1.0)
        self.state = ConversationState(playbook)

    def __call__(self, event: ev.Event) -> ev.Event:
        self.log.append(event)
        self.state.apply(event)
        return event


def _start(emit: Emitter) -> None:
    emit(
        ev.SessionStart(
            session_id="s1",
            playbook_hash="abc",
            anchor="2026-11-30T09:00:00",
            timezone="Europe/Paris",
            call={"channel": "phone"},
            env_keys=["API_TOKEN"],
        )
    )
    emit(ev.Advance(to="booking.collect", rule_id="init", by="init"))


def test_session_start_sets_identity_anchor_and_call(playbook: Playbook) -> None:
    emit = Emitter(playbook)
    _start(emit)
    state = emit.state
    assert state.session_id == "s1" and state.playbook_hash == "abc"
    assert state.anchor is not None and state.anchor.utcoffset() == timedelta(hours=1)
    assert state.timezone == "Europe/Paris"
    assert state.call == {"channel": "phone"}
    assert state.env_keys == {"API_TOKEN"}
    assert state.checkpoint == "booking.collect" and state.checkpoint_entered_version == 2
    assert state.scope()["call"] == {"channel": "phone", "session_id": "s1"}


def test_bad_anchor_is_a_clear_error(playbook: Playbook) -> None:
    state = ConversationState(playbook)
    event = ev.SessionStart(session_id="s", playbook_hash="h", anchor="tomorrow", version=1)
    with pytest.raises(ValueError, match="anchor 'tomorrow' is not an ISO 8601"):
        state.apply(event)


def test_apply_refuses_out_of_order_events(playbook: Playbook) -> None:
    emit = Emitter(playbook)
    _start(emit)
    with pytest.raises(ValueError, match="state at version 2 cannot apply"):
        emit.state.apply(emit.log[1])
    with pytest.raises(ValueError, match="version 0"):
        emit.state.apply(ev.Utterance(role="user", text="unstamped"))


def test_slot_write_and_clear_and_results(playbook: Playbook) -> None:
    emit = Emitter(playbook)
    _start(emit)
    state = emit.state
    emit(ev.SlotWrite(key="party_size", value=4, status="accepted", by="director"))
    assert state.slots["party_size"].value == 4
    assert state.slots["party_size"].version == 3
    # No "never downgrade" in the fold: the planner decides, the fold records.
    emit(ev.SlotWrite(key="party_size", value=4, status="confirmed", by="caller"))
    emit(ev.SlotWrite(key="party_size", value=4, status="provisional", by="policy"))
    assert state.slots["party_size"].status == "provisional"
    emit(ev.ToolResult(tool="avail", ok=True, status=200, data={"n": 1}, store_as="availability"))
    emit(ev.ToolResult(tool="log_only", ok=False, error="boom"))
    assert set(state.results) == {"availability"}
    assert state.scope()["results"]["availability"] == {
        "ok": True, "status": 200, "data": {"n": 1}, "error": None,
    }
    emit(ev.SlotClear(key="results.availability", reason="invalidated by party_size"))
    assert state.results == {}
    assert "party_size" in state.slots
    emit(ev.SlotClear(key="party_size", reason="denied"))
    assert "party_size" not in state.slots and state.denied == {"party_size"}
    emit(ev.SlotWrite(key="party_size", value=5, status="accepted", by="director"))
    assert state.denied == set()


def test_tool_calls_count_and_pipeline_marker(playbook: Playbook) -> None:
    emit = Emitter(playbook)
    _start(emit)
    emit(ev.ToolCall(tool="avail"))
    emit(ev.ToolCall(tool="avail", attempt=2))
    emit(ev.ToolResult(tool="check", pipeline="check", store_as="pipeline", ok=False))
    assert emit.state.calls == {"avail": 2}
    assert emit.state.scope()["calls"] == {"avail": 2}
    assert emit.state.last_pipeline_version == 5
    assert emit.state.results["pipeline"].ok is False


def test_advance_resets_counters_but_keeps_the_note_queue(playbook: Playbook) -> None:
    emit = Emitter(playbook)
    _start(emit)
    state = emit.state
    emit(ev.SteeringNote(text="first"))
    emit(ev.Utterance(role="user", text="hi"))
    emit(ev.External(kind="silence", name="user_away"))
    emit(ev.Utterance(role="assistant", text="Hello.", kind="talker", spoke_from_version=4))
    # An exit line of the checkpoint left names no checkpoint: it marks nothing spoken here.
    emit(ev.Utterance(role="assistant", text="Let me check.", kind="verbatim"))
    assert state.verbatim_spoken == set()
    emit(ev.Utterance(role="assistant", text="Your table.", kind="verbatim",
                      checkpoint="booking.collect"))
    assert state.user_turns_in_checkpoint == 1 and state.silence_count == 1
    assert state.verbatim_spoken == {"booking.collect"}
    assert state.talker_segments_in_checkpoint == 1
    emit(ev.SteeringNote(text="second", kind="repair"))
    emit(ev.Advance(from_="booking.collect", to="booking.confirm", rule_id="r", by="director"))
    assert state.checkpoint == "booking.confirm" and state.checkpoint_entered_version == 10
    assert state.user_turns_in_checkpoint == 0 and state.silence_count == 0
    assert state.verbatim_spoken == set() and state.talker_segments_in_checkpoint == 0
    assert [n.text for n in state.pending_notes] == ["first", "second"]


def test_user_utterance_resets_silence(playbook: Playbook) -> None:
    emit = Emitter(playbook)
    _start(emit)
    emit(ev.External(kind="silence", name="user_away"))
    emit(ev.External(kind="silence", name="user_away"))
    emit(ev.External(kind="webhook", name="paid"))
    assert emit.state.silence_count == 2
    emit(ev.Utterance(role="user", text="sorry"))
    assert emit.state.silence_count == 0


def test_note_consumed_pops_notes_and_refusals_up_to_its_version(playbook: Playbook) -> None:
    emit = Emitter(playbook)
    _start(emit)
    state = emit.state
    emit(ev.SteeringNote(text="a"))  # 3
    emit(ev.SlotRefused(key="date", message="date: that day is in the past; ask again"))  # 4
    emit(ev.SteeringNote(text="b"))  # 5
    emit(ev.NoteConsumed(upto=4))  # the render began at 4: it showed a and the refusal
    assert [n.text for n in state.pending_notes] == ["b"]
    assert state.refusals == []
    emit(ev.SlotRefused(key="name", message="name: ask for a name"))
    assert state.refusals == ["name: ask for a name"]
    emit(ev.NoteConsumed(upto=8))
    assert not state.pending_notes and state.refusals == []


def test_speech_correction_and_superseded(playbook: Playbook) -> None:
    emit = Emitter(playbook)
    _start(emit)
    state = emit.state
    said = emit(ev.Utterance(role="assistant", text="So that is four people, right?",
                             kind="talker", spoke_from_version=2))
    user = emit(ev.Utterance(role="user", text="yes", message_id="m1"))
    emit(ev.Utterance(role="user", text="yes it is", message_id="m2"))
    assert state.user_turns_in_checkpoint == 2
    emit(ev.UtteranceSuperseded(utterance_version=user.version, by_version=5))
    emit(ev.UtteranceSuperseded(utterance_version=user.version, by_version=5))  # once only
    assert state.user_turns_in_checkpoint == 1
    assert state.entry(user.version).superseded  # type: ignore[union-attr]
    emit(ev.SpeechCorrection(utterance_version=said.version, heard_text="So that is"))
    entry = state.entry(said.version)
    assert entry is not None and entry.heard_text == "So that is" and entry.interrupted
    assert entry.text == "So that is four people, right?" and not entry.fully_heard
    assert state.last_user() is state.entry(5)
    assert state.read_back_target(5) is entry
    # The superseded user utterance is skipped when looking back.
    assert state.read_back_target(4) is entry
    emit(ev.SpeechCorrection(utterance_version=999, heard_text="x"))  # nothing to correct
    assert state.version == 9


def test_read_back_target_skips_filler_but_not_prompts(playbook: Playbook) -> None:
    emit = Emitter(playbook)
    _start(emit)
    state = emit.state
    emit(ev.Utterance(role="assistant", text="Four, right?", kind="talker", spoke_from_version=2))
    emit(ev.Utterance(role="assistant", text="One moment.", kind="filler", filler=True))
    emit(ev.Utterance(role="user", text="yes"))
    target = state.read_back_target(5)
    assert target is not None and target.text == "Four, right?"
    emit(ev.Utterance(role="assistant", text="Are you still there?", kind="prompt"))
    emit(ev.Utterance(role="user", text="yes"))
    target = state.read_back_target(7)
    assert target is not None and target.kind == "prompt"
    emit(ev.Utterance(role="user", text="and another thing"))
    assert state.read_back_target(8) is None  # answers the caller's own turn, not a read-back
    assert state.last_assistant().text == "Are you still there?"  # type: ignore[union-attr]


def test_session_end(playbook: Playbook) -> None:
    emit = Emitter(playbook)
    _start(emit)
    emit(ev.SessionEnd(outcome="booked", reason="terminal"))
    assert emit.state.ended and emit.state.outcome == "booked"
    assert emit.state.end_reason == "terminal"
    assert emit.state.scope()["call"]["end_reason"] == "terminal"


def test_scope_is_cached_per_version_and_adds_env_and_pipeline(playbook: Playbook) -> None:
    emit = Emitter(playbook)
    _start(emit)
    state = emit.state
    emit(ev.SlotWrite(key="name", value="Ada", status="accepted", by="director"))
    first = state.scope()
    assert first is state.scope()
    assert first["slots"] == {"name": "Ada"}
    env = {"API_TOKEN": "t"}
    with_env = state.scope(env=env, pipeline={"ok": True, "failed": False})
    assert with_env["env"] is env and with_env["pipeline"] == {"ok": True, "failed": False}
    assert with_env is state.scope(env=env, pipeline={"ok": True, "failed": False})
    assert "pipeline" not in state.scope()
    emit(ev.SlotWrite(key="name", value="Bob", status="accepted", by="director"))
    assert first["slots"] == {"name": "Ada"}  # an old scope is a snapshot, not a live view
    assert state.scope()["slots"] == {"name": "Bob"}
    assert state.scope(env=env)["slots"] == {"name": "Bob"}


# --- property tests ---------------------------------------------------------------------

_values = st.one_of(
    st.none(), st.integers(-5, 50), st.text(max_size=8), st.booleans(),
    st.lists(st.integers(0, 3), max_size=3), st.dictionaries(st.sampled_from("ab"), st.integers()),
)
_versions = st.integers(min_value=1, max_value=60)
_keys = st.sampled_from([*SLOT_KEYS, "results.availability", "results.pipeline"])

_event = st.one_of(
    st.builds(
        ev.Utterance,
        role=st.sampled_from(["user", "assistant"]),
        text=st.text(max_size=12),
        spoke_from_version=st.none() | _versions,
        interrupted=st.booleans(),
        filler=st.booleans(),
        kind=st.sampled_from([None, "talker", "verbatim", "filler", "prompt", "line"]),
        purpose=st.sampled_from([None, "reply", "opening"]),
        message_id=st.none() | st.sampled_from(["m1", "m2"]),
        checkpoint=st.none() | st.sampled_from(["booking.collect", "booking.confirm"]),
    ),
    st.builds(ev.SpeechCorrection, utterance_version=_versions, heard_text=st.text(max_size=6)),
    st.builds(ev.UtteranceSuperseded, utterance_version=_versions),
    st.builds(
        ev.SlotWrite,
        key=st.sampled_from(SLOT_KEYS),
        value=_values,
        status=st.sampled_from(["provisional", "accepted", "confirmed"]),
        by=st.sampled_from(["director", "caller", "tool", "rule", "call_start", "policy"]),
    ),
    st.builds(ev.SlotRefused, key=st.sampled_from(SLOT_KEYS), message=st.text(max_size=10)),
    st.builds(ev.SlotClear, key=_keys, reason=st.sampled_from(["denied", "cleared by rule"])),
    st.builds(
        ev.Advance,
        from_=st.none() | st.sampled_from(CHECKPOINTS),
        to=st.sampled_from(CHECKPOINTS),
        rule_id=st.just("r"),
        by=st.sampled_from(["director", "expr", "policy"]),
    ),
    st.builds(ev.SteeringNote, text=st.text(max_size=8), kind=st.sampled_from(["steer", "repair"])),
    st.builds(ev.NoteConsumed, upto=_versions),
    st.builds(ev.ToolCall, tool=st.sampled_from(["avail", "book"])),
    st.builds(
        ev.ToolResult,
        tool=st.sampled_from(["avail", "check"]),
        ok=st.booleans(),
        status=st.none() | st.sampled_from([200, 500]),
        data=_values,
        store_as=st.sampled_from([None, "availability", "pipeline"]),
        pipeline=st.none() | st.just("check"),
    ),
    st.builds(ev.EnvWrite, key=st.sampled_from(["API_TOKEN", "SESSION"])),
    st.builds(ev.External, kind=st.sampled_from(["silence", "webhook"]), name=st.just("x")),
    st.builds(ev.Degraded, component=st.just("director"), detail=st.text(max_size=5)),
    st.builds(ev.SessionEnd, outcome=st.none() | st.just("booked")),
    st.builds(ev.Verdict, verdict=st.just({"slots": {}})),
)

_start_event = st.builds(
    ev.SessionStart,
    session_id=st.sampled_from(["s1", "s2"]),
    playbook_hash=st.just("h"),
    anchor=st.sampled_from(["2026-11-30T09:00:00+00:00", "2026-11-30T09:00:00"]),
    timezone=st.sampled_from(["UTC", "Europe/Paris"]),
    call=st.dictionaries(st.sampled_from(["channel", "direction"]), st.text(max_size=4)),
    env_keys=st.lists(st.sampled_from(["A", "B"]), max_size=2),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=_start_event, body=st.lists(_event, max_size=50), peek=st.sets(st.integers(0, 50)))
def test_incremental_state_equals_fold_from_scratch(
    start: ev.SessionStart, body: list[ev.Event], peek: set[int]
) -> None:
    playbook = _playbook()
    emit = Emitter(playbook)
    emit(start)
    for index, event in enumerate(body):
        emit(event)
        if index in peek:  # reading the scope mid-way must not disturb the fold
            emit.state.scope(env={"A": "1"})
            emit.state.scope()
    incremental = emit.state
    scratch = ConversationState.fold(emit.log, playbook)
    for name in STATE_FIELDS:
        assert incremental.snapshot()[name] == scratch.snapshot()[name], name
    assert incremental.scope() == scratch.scope()
    assert incremental == scratch


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=_start_event, body=st.lists(_event, max_size=40))
def test_jsonl_round_trip_gives_equal_events_and_state(
    start: ev.SessionStart, body: list[ev.Event]
) -> None:
    playbook = _playbook()
    emit = Emitter(playbook)
    emit(start)
    for event in body:
        emit(event)
    again = EventLog.from_jsonl(emit.log.to_jsonl())
    assert list(again) == list(emit.log)
    assert ConversationState.fold(again, playbook) == emit.state
    assert ConversationState.fold(again, playbook).scope() == emit.state.scope()


# --- memory (SPEC §14) ------------------------------------------------------------------


def _typical_call(playbook: Playbook) -> Emitter:
    """30 events of an ordinary booking call: turns, slots, a verdict, a tool, notes."""
    emit = Emitter(playbook)
    _start(emit)
    anchor = datetime(2026, 11, 30, 9, tzinfo=timezone.utc)
    emit(ev.Utterance(role="assistant", text="Hi, thanks for calling Chez Ada. How many "
                      "of you will be dining?", kind="talker", purpose="opening",
                      spoke_from_version=2))
    for turn in range(4):
        user = emit(ev.Utterance(role="user", text=f"We are {turn + 2} people, name is Ada",
                                 message_id=f"msg_{turn:04d}abcdef"))
        emit(ev.Verdict(verdict={"slots": {"party_size": turn + 2, "name": "Ada"}},
                        latency_ms=412.5, user_version=user.version))
        emit(ev.SlotWrite(key="party_size", value=turn + 2, status="accepted", by="director"))
        emit(ev.Utterance(role="assistant", text="Lovely. And which day would suit you?",
                          kind="talker", purpose="reply", spoke_from_version=user.version))
    emit(ev.SteeringNote(text="Caller is in a hurry; keep it short."))
    emit(ev.ToolCall(tool="availability", args={"date": (anchor + timedelta(days=1)).date()
                                                .isoformat(), "party": 4}))
    emit(ev.ToolResult(tool="availability", ok=True, status=200, duration_ms=84.2,
                       data={"slots": ["19:00", "20:30"]}, store_as="availability"))
    emit(ev.NoteConsumed(upto=20))
    emit(ev.Advance(from_="booking.collect", to="booking.confirm", rule_id="booking.collect.0",
                    by="director"))
    emit(ev.SlotWrite(key="date", value="2026-12-01", status="provisional", by="director"))
    while len(emit.log) < 30:
        emit(ev.Utterance(role="user", text="yes that's right"))
    return emit


def test_memory_of_one_call_of_30_events_stays_small(playbook: Playbook) -> None:
    _typical_call(playbook)  # warm caches (interned strings, msgspec types)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        emit = _typical_call(playbook)
        emit.state.scope()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    used = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert len(emit.log) == 30
    assert used < 50 * 1024, f"one call of 30 events uses {used} bytes"


def test_logged_event_costs_under_500_bytes(playbook: Playbook) -> None:
    source = _typical_call(playbook)
    lines = source.log.to_jsonl().splitlines()
    EventLog.from_jsonl("\n".join(lines))  # warm the decoder
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        log = EventLog.from_jsonl("\n".join(lines))
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    used = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    per_event = used / len(log)
    assert per_event < 500, f"{per_event:.0f} bytes per logged event"


def test_apply_costs_the_same_late_in_a_long_call(playbook: Playbook) -> None:
    """SPEC §5: applying an event costs the same at event 10 and at event 40,000."""
    import time

    def batch(start: int) -> list[ev.Event]:
        """800 stamped events that touch the transcript index, slots and the note queue."""
        out: list[ev.Event] = []
        for i in range(200):
            version = start + 4 * i
            out += [
                ev.Utterance(role="user", text="four please", version=version),
                ev.SlotWrite(key="party_size", value=i, status="accepted", by="director",
                             version=version + 1),
                ev.SpeechCorrection(utterance_version=version, heard_text="four",
                                    version=version + 2),
                ev.SteeringNote(text="short", version=version + 3),
            ]
        return out

    def timed(state: ConversationState) -> float:
        events = batch(state.version + 1)
        began = time.perf_counter()
        for event in events:
            state.apply(event)
        return time.perf_counter() - began

    def fresh() -> ConversationState:
        emit = Emitter(playbook)
        _start(emit)
        return emit.state

    early = min(timed(fresh()) for _ in range(5))
    long_call = fresh()
    for _ in range(50):
        timed(long_call)
    assert long_call.version > 40_000 and len(long_call.pending_notes) >= 10_000
    late = min(timed(long_call) for _ in range(5))
    assert late < early * 3, f"apply at 40k events took {late / early:.1f}x the early cost"
