"""What each LiveKit reply is, and how the call starts (SPEC §10).

LiveKit asks for a reply with a ``chat_ctx``; the planner claims the user messages in it that
the log has not seen (synchronously, so overlapping streams never log one twice) and answers
with the opening, a turn, or nothing (a regeneration of a reply already given). The start
is coordinated with ``DialogAgent``: turns that arrive before it has decided how the call
starts wait, and the first of them speaks the opening before its answer.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any, Literal

from superdialog_core import LogCorruptError
from superdialog_core.events import Advance, Utterance

from .sync import SpeechSync


class ReplyPlanner:
    """Plans replies for one call's runtime; see the module docstring."""

    def __init__(self, runtime_of: Callable[[], Any], speech: SpeechSync, store: Any) -> None:
        self._runtime_of = runtime_of
        self._speech = speech
        self._store = store
        self.resumed = False
        self._opened = False  # the opening ran (or the call started silently, or resumed)
        # Set when the start (opening stream or silent start) is over: turns wait for it, so
        # the runtime never runs a turn before its start finished and replies stay in order.
        self._opening_done: asyncio.Event | None = None
        self._start_decision: asyncio.Future[str] | None = None  # see hold_turns
        self._turn_waiting = False

    def opening_finished(self) -> None:
        if self._opening_done is not None:
            self._opening_done.set()

    async def prepare(self) -> bool:
        """Build the runtime and, when the store holds this session's log, adopt it.

        Returns True for a resumed call: the runtime continues from the stored log and the
        opening is not replayed. Raises ``CallStartError``/``ConfigError`` before anything is
        said when the call cannot start.
        """
        rt = self._runtime_of()
        store = self._store
        if store is None or self._opened:
            return self.resumed
        try:
            loaded = store.load(rt.session_id)
            if inspect.isawaitable(loaded):
                loaded = await loaded
        except LogCorruptError as exc:
            if not exc.torn_tail:
                raise  # damage mid-log: an error naming the line until repair() is called
            loaded = exc.prefix  # a torn last line: the runtime cuts it when it adopts the log
        # A log cut before its first advance (the worker died during the start) is no call
        # the caller heard: it is not resumed, the opening runs (the runtime re-runs its start).
        started = loaded is not None and any(isinstance(e, Advance) for e in loaded)
        if started and not self._opened:
            self.resumed = True
            await self._start_silently()  # adopts the stored log; says nothing
        return self.resumed

    def hold_turns(self) -> None:
        """Make user turns wait until the agent has decided how the call starts.

        ``DialogAgent`` calls this first thing on enter, before it awaits anything (reading the
        store may take a while). A caller who speaks meanwhile is answered by one reply that
        speaks the opening first, so nothing is skipped and nothing is heard out of order.
        """
        if self._start_decision is None and not self._opened:
            self._start_decision = asyncio.get_running_loop().create_future()

    def decide_start(self, mode: Literal["speak", "silent", "resumed"]) -> bool:
        """Release held turns. True: the caller should now generate the opening reply.

        False for ``silent``/``resumed``, and for ``speak`` when a caller turn is already
        waiting: that turn's reply speaks the opening first.
        """
        decision = self._start_decision
        if decision is not None and not decision.done():
            decision.set_result(mode)
        return mode == "speak" and not self._turn_waiting and not self._opened

    async def start_silently(self) -> None:
        """Start without speaking (an outbound call waits for the callee's first words)."""
        if not self._opened:
            await self._start_silently()

    async def _start_silently(self) -> None:
        self._opened = True
        done = self._opening_done = self._opening_done or asyncio.Event()
        try:
            await self._runtime_of().start(speak=False)
        finally:
            done.set()

    def plan(self, chat_ctx: Any) -> tuple[str, list[str]]:
        """What this reply is: ``("opening", [])``, ``("turn", texts)`` or ``("none", [])``.

        Synchronous on purpose: new user messages are claimed before any await, so concurrent
        streams never log the same message twice.
        """
        speech = self._speech
        ledger = speech.ledger
        assistant, unseen = ledger.scan(chat_ctx)  # one pass over the context for both
        speech.sync_messages(assistant)
        fresh = ledger.claim(unseen)
        texts = [t for t in (ledger.user_ids[m.id].strip() for m in fresh) if t]
        if texts:
            return "turn", texts
        if not self._opened:
            self._opened = True
            return "opening", []
        return "none", []

    async def open_reply(self, plan: tuple[str, list[str]]) -> AsyncIterator[str] | None:
        """The runtime stream for a plan (earlier user messages of a burst run as silent turns)."""
        kind, texts = plan
        rt = self._runtime_of()
        if kind == "opening":
            self._opening_done = self._opening_done or asyncio.Event()
            return rt.stream_start()
        if kind == "none":
            return None
        mode = None
        if self._start_decision is not None:
            if not self._start_decision.done():
                self._turn_waiting = True
            mode = await self._start_decision
        if mode == "speak" and not self._opened:
            self._opened = True
            return self._opening_then(texts)
        if self._opening_done is not None:
            await self._opening_done.wait()
        # A first user turn before any opening (outbound call, or a plain Agent that never
        # asked for one): the runtime starts silently by itself.
        self._opened = True
        return await self._turns(texts)

    async def _turns(self, texts: list[str]) -> AsyncIterator[str]:
        rt = self._runtime_of()
        for text in texts[:-1]:
            turn = await rt.user_turn(text)
            # Its reply was never sent to LiveKit: the caller heard none of it.
            for event in turn.events:
                if isinstance(event, Utterance) and event.role == "assistant":
                    rt.mark_heard(event.version, "")
        return rt.stream_turn(texts[-1])

    async def _opening_then(self, texts: list[str]) -> AsyncIterator[str]:
        """The opening, then the reply to the caller's first words, as one stream."""
        done = self._opening_done = self._opening_done or asyncio.Event()
        said = False
        try:
            async with aclosing(self._runtime_of().stream_start()) as opening:
                async for piece in opening:
                    said = True
                    yield piece
        finally:
            done.set()
        first = True
        async with aclosing(await self._turns(texts)) as reply:
            async for piece in reply:
                if first and said and not piece[:1].isspace():
                    yield " "  # the two replies are separate segments: one joining space
                first = False
                yield piece


__all__ = ["ReplyPlanner"]
