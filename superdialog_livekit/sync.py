"""Keeping the event log in step with the ``chat_ctx`` LiveKit passes, by message id.

LiveKit hands every ``chat()`` a copy of the whole conversation. The log must learn each user
message exactly once (a regenerated reply with the same context logs nothing twice), and must
learn what the caller actually heard of each assistant message (an interrupted message is
truncated to the delivered text). Assistant message ids are made by LiveKit after the stream,
so a reply is matched to its message through what was delivered: every stream (and every line
spoken with ``session.say``) is a ``Delivery`` that records the exact text sent and the log
versions of the utterances inside it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from superdialog_core.events import Utterance

logger = logging.getLogger("superdialog_livekit")

_NOT_OURS = ("say", "fallback", "other_agent")  # Utterance kinds of lines the engine logged for others


@dataclass
class Delivery:
    """Text sent to LiveKit in one speech (a reply stream or a ``say`` line) and its utterances."""

    source: str  # "stream" | "say"
    text: str = ""
    # (log version, start offset, end offset) of each assistant utterance inside ``text``.
    utterances: list[tuple[int, int, int]] = field(default_factory=list)
    handle: Any = None  # the SpeechHandle of a say line (its message names it)
    closed: bool = False  # no more text will be added
    cancelled: bool = False  # the stream was cancelled (barge-in or session close)
    settled: bool = False  # heard text applied (or known to be complete)
    message_id: str | None = None

    def add(self, piece: str) -> None:
        self.text += piece

    def attach(self, utterances: Iterable[Utterance]) -> list[int]:
        """Locate each logged utterance inside the delivered text, in order; returns their versions."""
        cursor = 0
        attached: list[int] = []
        for utterance in utterances:
            at = self.text.find(utterance.text, cursor) if utterance.text else -1
            if at < 0:
                continue  # not part of this delivery (a concurrent reply's segment)
            end = at + len(utterance.text)
            self.utterances.append((utterance.version, at, end))
            attached.append(utterance.version)
            cursor = end
        return attached

    def heard(self, delivered: str | None) -> list[tuple[int, str]]:
        """``(version, heard_text)`` for every utterance the caller did not hear in full.

        ``delivered`` is the (possibly truncated) assistant message text; ``None`` means nothing
        of this delivery reached the caller.
        """
        if delivered is None:
            cut = 0
        else:
            found = covered_length(self.text, delivered)
            # A transcript LiveKit rewrote (a custom transcription_node) is no prefix: fall back
            # to its length, the best estimate of how far playout got.
            cut = found if found is not None else min(len(self.text), len(delivered))
        corrections = []
        for version, start, end in self.utterances:
            if end <= cut:
                continue
            corrections.append((version, self.text[start:cut].strip() if cut > start else ""))
        return corrections


def covered_length(full: str, delivered: str) -> int | None:
    """The offset in ``full`` up to which ``delivered`` is its prefix, ignoring whitespace.

    LiveKit may normalise spaces in the forwarded transcript, so both strings are walked with
    whitespace skipped. ``None`` when ``delivered`` is not a prefix of ``full`` at all.
    """
    if full.startswith(delivered):
        return len(delivered)
    i = covered = 0
    for char in delivered:
        if char.isspace():
            continue
        while i < len(full) and full[i].isspace():
            i += 1
        if i >= len(full) or full[i] != char:
            return None
        i += 1
        covered = i
    return covered


def _made_here(message: Any) -> bool:
    """LiveKit stamped the message with this plugin's LLM metadata (provider ``superdialog``):
    a reply of this engine even when a transcription_node rewrote its text."""
    metrics = getattr(message, "metrics", None)
    meta = metrics.get("llm_metadata") if isinstance(metrics, dict) else None
    return bool(meta) and meta.get("model_provider") == "superdialog"


def message_text(message: Any) -> str:
    """The text of a LiveKit ChatMessage (str parts only)."""
    text = getattr(message, "text_content", None)
    if text is not None:
        return text
    return "".join(part for part in getattr(message, "content", []) if isinstance(part, str))


@dataclass
class ChatLedger:
    """Which chat_ctx messages the log already knows, and the deliveries awaiting their message."""

    user_ids: dict[str, str] = field(default_factory=dict)  # message id -> text logged for it
    assistant_ids: set[str] = field(default_factory=set)
    # LiveKit assistant message id -> the log versions of the utterances it spoke.
    message_versions: dict[str, list[int]] = field(default_factory=dict)
    deliveries: list[Delivery] = field(default_factory=list)
    # Items that are neither the caller's words nor this engine's replies, seen once each:
    # per-reply instructions (system messages), function calls and their outputs.
    system_ids: set[str] = field(default_factory=set)
    function_ids: set[str] = field(default_factory=set)
    call_ids: set[str] = field(default_factory=set)  # call ids of this engine's Talker's calls
    # Assistant messages this engine did not produce (a say, a fallback, another agent).
    foreign: list[Any] = field(default_factory=list)
    _unseen: list[Any] = field(default_factory=list)  # the last scan's unseen items, in order

    def new_user_messages(self, chat_ctx: Any) -> list[Any]:
        """User messages not seen before, in order; they are claimed at once (no await between)."""
        return self.claim(self.scan(chat_ctx)[1])

    def scan(self, chat_ctx: Any) -> tuple[list[Any], list[Any]]:
        """One pass over ``chat_ctx``: the assistant messages not matched yet and the user
        messages not seen yet, each in order. Nothing is claimed or matched here.

        The same pass keeps every unseen item in context order (with the system messages and
        function items not seen yet) for ``scan_extra``.
        """
        assistant: list[Any] = []
        user: list[Any] = []
        unseen: list[Any] = []
        matched = self.assistant_ids
        seen = self.user_ids
        foreign = {m.id for m in self.foreign} if self.foreign else None
        for item in chat_ctx.items:
            kind = getattr(item, "type", None)
            if kind != "message":
                if (kind == "function_call" or kind == "function_call_output") \
                        and item.id not in self.function_ids:
                    unseen.append(item)
                continue
            role = item.role
            if role == "user":
                if item.id not in seen:
                    user.append(item)
                    unseen.append(item)
            elif role == "assistant":
                if item.id not in matched:
                    assistant.append(item)
                    unseen.append(item)
                elif foreign and item.id in foreign:  # observed already, not yet planned
                    unseen.append(item)
            elif role == "system" and item.id not in self.system_ids \
                    and not item.id.startswith("lk."):
                unseen.append(item)
        self._unseen = unseen
        return assistant, user

    def scan_extra(self, *, messages_only: bool = False) -> list[Any]:
        """The items of the last ``scan`` a plain turn does not explain, in context order.

        Unseen user messages come along (to tell which of them another line answered) only
        when something else is unseen: per-reply instructions (system messages LiveKit did not
        make itself, whose ids start with ``lk.``), function calls and outputs, and assistant
        messages ``match`` found foreign (``foreign``). Empty for a plain turn. Call it after
        the assistant messages of that scan were matched (``SpeechSync.sync_messages``).
        """
        foreign = {m.id for m in self.foreign}
        self.foreign = []
        out: list[Any] = []
        interesting = bool(foreign)
        for item in self._unseen:
            kind = item.type
            if kind != "message":
                if not messages_only:
                    out.append(item)
                    interesting = True
                continue
            role = item.role
            if role == "user":
                if item.id not in self.user_ids:
                    out.append(item)
            elif role == "assistant":
                if item.id in foreign:
                    out.append(item)
            elif not messages_only and any(isinstance(c, str) and c.strip()
                                           for c in item.content):
                out.append(item)
                interesting = True
        self._unseen = []
        return out if interesting else []

    def claim_text(self, message: Any) -> str:
        """Claim one user message (logged by someone other than a turn); returns its text."""
        text = message_text(message)
        self.user_ids[message.id] = text
        return text

    def claim(self, messages: list[Any]) -> list[Any]:
        """Claim user messages (from ``scan``) not seen yet; returns those, in order."""
        fresh = []
        for item in messages:
            if item.id in self.user_ids:
                continue
            self.user_ids[item.id] = message_text(item)
            fresh.append(item)
        return fresh

    def forgotten_user_ids(self, chat_ctx: Any) -> list[str]:
        """Logged user messages that are no longer in ``chat_ctx`` (replaced by LiveKit)."""
        present = {item.id for item in chat_ctx.items if getattr(item, "type", None) == "message"}
        return [mid for mid in self.user_ids if mid not in present]

    def open(self, source: str) -> Delivery:
        delivery = Delivery(source)
        self.deliveries.append(delivery)
        return delivery

    def assistant_messages(self, chat_ctx: Any) -> list[Any]:
        """Assistant messages not matched yet, in order."""
        return [
            item
            for item in chat_ctx.items
            if getattr(item, "type", None) == "message"
            and item.role == "assistant"
            and item.id not in self.assistant_ids
        ]

    def match(self, message: Any) -> tuple[Delivery | None, list[tuple[int, str]]]:
        """Match an assistant message to its delivery; returns the heard-text corrections.

        Deliveries are matched oldest first by text (the message is the delivered prefix).
        A cancelled delivery older than the match never produced a message: the caller heard
        none of it. Unmatched messages (an app's own ``say``) are remembered and ignored.
        """
        self.assistant_ids.add(message.id)
        text = message_text(message)
        interrupted = bool(getattr(message, "interrupted", False))
        corrections: list[tuple[int, str]] = []
        for delivery in list(self.deliveries):
            if delivery.settled or not delivery.closed or not text.strip():
                continue
            if covered_length(delivery.text, text) is None:
                continue
            # Older cancelled deliveries that never became a message were heard not at all.
            for older in self.deliveries[: self.deliveries.index(delivery)]:
                if older.closed and older.cancelled and not older.settled:
                    corrections.extend(self.settle_unheard(older))
            delivery.message_id = message.id
            delivery.settled = True
            self.deliveries.remove(delivery)
            self.message_versions[message.id] = [v for v, _, _ in delivery.utterances]
            if interrupted or delivery.cancelled:
                corrections.extend(delivery.heard(text))
            return delivery, corrections
        if text.strip() and not _made_here(message) and not self._said_here(message):
            self.foreign.append(message)  # a say, a fallback's reply, another agent's line
        return None, corrections

    def _said_here(self, message: Any) -> bool:
        """A line this engine spoke with ``session.say`` whose handle already holds it."""
        for delivery in self.deliveries:
            handle = delivery.handle
            if handle is not None and any(i is message or getattr(i, "id", None) == message.id
                                          for i in getattr(handle, "chat_items", ())):
                return True
        return False

    def settle_unheard(self, delivery: Delivery) -> list[tuple[int, str]]:
        """A delivery whose speech ended with no assistant message: nothing of it was heard."""
        if delivery.settled:
            return []
        delivery.settled = True
        if delivery in self.deliveries:
            self.deliveries.remove(delivery)
        return delivery.heard(None)

    def settle_with(self, delivery: Delivery, message: Any) -> list[tuple[int, str]]:
        """A delivery whose speech handle reported its message directly (no text search needed)."""
        self.assistant_ids.add(message.id)
        if delivery.settled:
            return []
        delivery.settled = True
        delivery.message_id = message.id
        if delivery in self.deliveries:
            self.deliveries.remove(delivery)
        self.message_versions[message.id] = [v for v, _, _ in delivery.utterances]
        if getattr(message, "interrupted", False) or delivery.cancelled:
            return delivery.heard(message_text(message))
        return []

    def settle_complete(self, delivery: Delivery) -> None:
        """A delivery that played in full (nothing to correct)."""
        delivery.settled = True
        if delivery in self.deliveries:
            self.deliveries.remove(delivery)


class SpeechSync:
    """Applies what LiveKit reports about delivered speech to the runtime.

    Owns the ``ChatLedger``; turns interrupted or missing assistant messages into
    ``runtime.mark_heard`` calls, and speaks runtime-logged lines with ``session.say``.
    """

    def __init__(self, runtime_of: Callable[[], Any], *, on_settled: Callable[[], None]) -> None:
        self.ledger = ChatLedger()
        self.session: Any = None  # the bound AgentSession (for say)
        self._runtime_of = runtime_of
        self._on_settled = on_settled

    def mark_heard(self, corrections: list[tuple[int, str]]) -> None:
        rt = self._runtime_of()
        for version, heard in corrections:
            try:
                rt.mark_heard(version, heard)
            except ValueError:
                # Not an assistant utterance of this call: a bookkeeping slip, never worth a crash
                # in a LiveKit callback, but loud.
                logger.exception("heard-text correction for version %s refused", version)

    def sync_history(self, chat_ctx: Any) -> None:
        """Corrections for assistant messages LiveKit reports in a ``chat_ctx``."""
        self.sync_messages(self.ledger.assistant_messages(chat_ctx))

    def sync_messages(self, messages: list[Any]) -> None:
        """Corrections for assistant messages not matched yet (``ChatLedger.scan``), in order."""
        for message in messages:
            _, corrections = self.ledger.match(message)
            self.mark_heard(corrections)

    def observe_message(self, message: Any) -> bool:
        """A ``conversation_item_added`` assistant message: correct heard text at once.

        True when it is a line this engine did not produce (left in ``ledger.foreign``).
        """
        if getattr(message, "type", None) != "message" or message.role != "assistant":
            return False
        if message.id in self.ledger.assistant_ids:
            return False
        _, corrections = self.ledger.match(message)
        self.mark_heard(corrections)
        return any(m is message for m in self.ledger.foreign)

    def attach_utterances(self, delivery: Delivery, after_version: int) -> None:
        """Find the assistant utterances the runtime logged for ``delivery`` (after a version)."""
        log = self._runtime_of().log
        known = {v for d in self.ledger.deliveries for v, _, _ in d.utterances}
        found = []
        for version in range(after_version + 1, log.version + 1):
            event = log.get(version)
            if (isinstance(event, Utterance) and event.role == "assistant" and version not in known
                    and event.kind not in _NOT_OURS):
                found.append(event)
        delivery.attach(found)

    def track_speech(self, delivery: Delivery, handle: Any, after_version: int) -> None:
        """Settle ``delivery`` from its SpeechHandle once played: interrupted → heard text.

        Without a handle (``chat()`` called outside a session) the delivery is matched later,
        when its message comes back in a ``chat_ctx``.
        """
        def done(h: Any) -> None:
            if not delivery.utterances:
                self.attach_utterances(delivery, after_version)
            messages = [i for i in h.chat_items
                        if getattr(i, "type", None) == "message" and i.role == "assistant"]
            if messages:
                self.mark_heard(self.ledger.settle_with(delivery, messages[-1]))
            elif h.interrupted or delivery.cancelled:
                self.mark_heard(self.ledger.settle_unheard(delivery))
            else:
                self.ledger.settle_complete(delivery)
            self._on_settled()

        if handle is not None:
            handle.add_done_callback(done)

    def say_line(self, text: str, utterances: list[Utterance] | None, *, interruptible: bool) -> Any:
        """Speak a line the runtime already logged with ``session.say`` and track what was heard.

        ``utterances`` are its logged events (found in the log by text when not given).
        Returns the SpeechHandle.
        """
        if self.session is None:
            raise RuntimeError("no AgentSession bound: call DialogMachineLLM.bind_session(session)")
        rt = self._runtime_of()
        if utterances is None:
            utterances = []
            for version in range(rt.log.version, max(0, rt.log.version - 50), -1):
                event = rt.log.get(version)
                if isinstance(event, Utterance) and event.role == "assistant" and event.text == text:
                    utterances = [event]
                    break
        delivery = self.ledger.open("say")
        delivery.add(text)
        delivery.closed = True
        delivery.attach(utterances)
        handle = self.session.say(text, allow_interruptions=interruptible)
        delivery.handle = handle
        self.track_speech(delivery, handle, rt.log.version)
        return handle


__all__ = ["ChatLedger", "Delivery", "SpeechSync", "covered_length", "message_text"]
