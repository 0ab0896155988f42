"""The Talker's incremental packing gives exactly the messages of the reference packing."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from superdialog_core import events as ev
from superdialog_core.log.eventlog import EventLog
from superdialog_core.log.state import ConversationState
from superdialog_core.playbook import Playbook
from superdialog_core.roles.transcript_packing import pack_transcript as _pack
from superdialog_core.roles.transcript_packing import packed_transcript as _packed

DOC: dict[str, Any] = {"journeys": {"j": {"checkpoints": [{"id": "a", "goal": "talk"}]}}}

TEXTS = st.sampled_from(["hi", "four of us", "", "  ", "Great. What day?", "é" * 30, "x" * 90])
STEP = st.one_of(
    st.tuples(st.just("say"), st.sampled_from(["user", "assistant"]), TEXTS),
    st.tuples(st.just("correct"), st.integers(0, 50), TEXTS),
    st.tuples(st.just("supersede"), st.integers(0, 50), st.just("")),
    st.tuples(st.just("pack"), st.integers(-5, 300), st.just("")),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(STEP, max_size=60))
def test_incremental_packing_equals_packing_from_scratch(steps: list[tuple[str, Any, str]]) -> None:
    state = ConversationState(Playbook.from_dict(DOC))
    log = EventLog()

    def emit(event: ev.Event) -> None:
        log.append(event)
        state.apply(event)

    emit(ev.SessionStart(session_id="s", playbook_hash="h", anchor="2026-11-30T10:00:00+00:00"))
    utterances: list[tuple[int, str]] = []
    for action, arg, text in steps:
        if action == "say":
            emit(ev.Utterance(role=arg, text=text))
            utterances.append((log.version, arg))
        elif action == "correct" and utterances:
            version, role = utterances[arg % len(utterances)]
            if role == "assistant":
                emit(ev.SpeechCorrection(utterance_version=version, heard_text=text))
        elif action == "supersede" and utterances:
            emit(ev.UtteranceSuperseded(utterance_version=utterances[arg % len(utterances)][0]))
        elif action == "pack":
            assert _packed(state, arg) == _pack(state.transcript, arg)
    for budget in (-1, 0, 5, 40, 10_000):
        assert _packed(state, budget) == _pack(state.transcript, budget)


def test_packing_a_long_call_does_not_walk_the_transcript() -> None:
    state = ConversationState(Playbook.from_dict(DOC))
    log = EventLog()
    for event in [ev.SessionStart(session_id="s", playbook_hash="h",
                                  anchor="2026-11-30T10:00:00+00:00")]:
        log.append(event)
        state.apply(event)
    for i in range(2000):
        event = ev.Utterance(role="user" if i % 2 == 0 else "assistant", text=f"line {i}")
        log.append(event)
        state.apply(event)
    assert _packed(state, 100) == _pack(state.transcript, 100)

    class Counting(list):  # type: ignore[type-arg]
        reads = 0

        def __getitem__(self, index: Any) -> Any:
            Counting.reads += 1
            return super().__getitem__(index)

        def __iter__(self) -> Any:
            Counting.reads += 1
            return super().__iter__()

        def __reversed__(self) -> Any:
            Counting.reads += 1
            return super().__reversed__()

    state.transcript = Counting(state.transcript)
    for _ in range(10):
        _packed(state, 100)
    assert Counting.reads == 0
