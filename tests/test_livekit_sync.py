"""The chat_ctx ledger: which messages the log knows and what the caller heard of each reply."""

from __future__ import annotations

from livekit.agents import llm
from superdialog_core.events import Utterance, stamp

from superdialog_livekit.sync import ChatLedger, Delivery, covered_length


def _utterance(version: int, text: str) -> Utterance:
    event = Utterance(role="assistant", text=text)
    stamp(event, version, 0.0)  # as the log would
    return event


def test_covered_length_ignores_whitespace_differences_and_rejects_other_text() -> None:
    assert covered_length("Hello there. How many?", "Hello there.") == len("Hello there.")
    assert covered_length("Hello  there. How", "Hello there. Ho") == len("Hello  there. Ho")
    assert covered_length("Hello there", "Goodbye") is None


def test_delivery_heard_cuts_the_utterance_where_playout_stopped() -> None:
    delivery = Delivery("stream")
    for piece in ["Sure", " thing.", " ", "How", " many", " of", " you?"]:
        delivery.add(piece)
    assert delivery.attach([_utterance(5, "Sure thing."), _utterance(6, "How many of you?")]) == [5, 6]
    assert delivery.heard("Sure thing. How ma") == [(6, "How ma")]
    assert delivery.heard("Sure th") == [(5, "Sure th"), (6, "")]
    assert delivery.heard(None) == [(5, ""), (6, "")]
    assert delivery.heard("Sure thing. How many of you?") == []


def test_ledger_claims_each_user_message_once() -> None:
    ctx = llm.ChatContext.empty()
    first = ctx.add_message(role="user", content="hi")
    ledger = ChatLedger()
    assert [m.id for m in ledger.new_user_messages(ctx)] == [first.id]
    assert ledger.new_user_messages(ctx) == []
    second = ctx.add_message(role="user", content="again")
    assert [m.id for m in ledger.new_user_messages(ctx.copy())] == [second.id]


def test_an_interrupted_message_matches_its_delivery_and_older_cancelled_ones_heard_nothing() -> None:
    ledger = ChatLedger()
    lost = ledger.open("stream")
    lost.add("Abandoned reply")
    lost.attach([_utterance(3, "Abandoned reply")])
    lost.closed = lost.cancelled = True
    live = ledger.open("stream")
    live.add("one two three four")
    live.attach([_utterance(7, "one two three four")])
    live.closed = True
    message = llm.ChatMessage(role="assistant", content=["one two"], interrupted=True)
    delivery, corrections = ledger.match(message)
    assert delivery is live
    assert corrections == [(3, ""), (7, "one two")]
    assert ledger.message_versions == {message.id: [7]}
    assert ledger.deliveries == []
    assert ledger.match(llm.ChatMessage(role="assistant", content=["app's own say"])) == (None, [])
