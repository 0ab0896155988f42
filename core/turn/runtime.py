"""The conversation engine: one ``Runtime`` per call (SPEC §1, §6).

A turn appends the caller's words, starts the Director as a task the runtime owns (never
cancelled by the speech that asked for it), and meanwhile speaks: at a soft gate the Talker
streams at once from the snapshot; at a hard gate the barrier ladder waits for the decision.
After the decision and quiescence the reply goes on with the lines that became due and, when
nothing was said yet at the checkpoint the turn ends at, one follow-through segment. A
barge-in (the consumer closes the stream) stops speech only: the yielded prefix is logged as
interrupted and the decision still applies; the next turn waits for it, so decisions apply in
order. Every change is an event appended through ``_emit`` (log + state in one step).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, Problem
from ..format.playbook import Playbook
from ..log.eventlog import EventLog
from ..log.events import Event, External, SessionStart, SlotWrite, SpeechCorrection, Utterance
from ..log.slots import plan_withdraw
from ..log.state import ConversationState
from ..values.context import ValueContext
from .quiesce import Progress
from .speaker import Speaker, finished
from .speech import Reply, Segment
from .startup import (
    anchor_time,
    cached_playbook_hash,
    check_call_start,
    check_call_values,
    check_options,
    check_python_tools,
    language_of,
    phone_region,
    resolve_env,
    warm_values_once,
)
from .turnflow import TurnFlow

if TYPE_CHECKING:
    import httpx

    from ..log.stores import LogStore
    from ..roles.models import DirectorModel, TalkerModel

logger = logging.getLogger("superdialog_core.runtime")

# How long an external event (webhook, timer, silence) waits for a reply still streaming.
EXTERNAL_PATIENCE = 30.0


@dataclass
class Turn:
    """What one turn (or the opening, or an external event) said and where it left the call.

    ``text`` is every streamed segment joined by single spaces; ``events`` the events appended
    during it. ``interruptible`` is False when a non-interruptible verbatim line was spoken.
    """

    text: str
    checkpoint: str | None
    ended: bool
    outcome: str | None
    events: list[Event] = field(default_factory=list)
    interruptible: bool = True


class Runtime:
    """The engine for one conversation (SPEC §1, §6). See the module docstring.

    ``director``/``talker`` are a ``DirectorModel``/``TalkerModel``. ``call_start`` values are
    checked against ``playbook.call_start`` (``CallStartError`` listing every problem) and
    written confirmed at start; ``call`` fills ``call.*``; ``${VAR}``s in ``env`` are resolved
    from the process environment now (``ConfigError`` naming every unset one). ``store``
    persists the log after each turn and resumes a known ``session_id``. ``barrier_timeout``,
    ``hold_timeout`` (default ``policies.hold_timeout``) drive the barrier ladder;
    ``director_timeout`` bounds the model call; ``on_late_line(text)`` receives lines that
    became due after a reply ended (logged once, just before the call).
    """

    def __init__(
        self,
        playbook: Playbook | str | os.PathLike[str],
        director: DirectorModel,
        talker: TalkerModel,
        *,
        python_tools: Mapping[str, Callable[..., Any]] | None = None,
        call_start: Mapping[str, Any] | None = None,
        call: Mapping[str, Any] | None = None,
        store: LogStore | None = None,
        session_id: str | None = None,
        barrier_timeout: float = 0.4,
        hold_timeout: float | None = None,
        director_timeout: float = 8.0,
        token_budget: int = 4000,
        now: datetime | None = None,
        http_client: httpx.AsyncClient | None = None,
        on_late_line: Callable[[str], Any] | None = None,
    ) -> None:
        # httpx and the tool runner are imported by the first Runtime, not with the package.
        from ..tools.runner import ToolRunner

        if not isinstance(playbook, Playbook):
            playbook = Playbook.load(playbook)
        problems = check_options(director, talker, barrier_timeout, hold_timeout,
                                 director_timeout, token_budget)
        if problems:
            raise ConfigError(problems)
        self.playbook = playbook
        self._director = director
        self._talker = talker
        self._store = store
        self._on_late_line = on_late_line
        self._barrier_timeout = barrier_timeout
        self._hold_timeout = hold_timeout if hold_timeout is not None else playbook.policies.hold_timeout
        self._director_timeout = director_timeout
        self._env: dict[str, Any] = resolve_env(playbook)
        sid = session_id or (call or {}).get("session_id") or uuid.uuid4().hex
        self._call = check_call_values(call, str(sid))
        self._anchor = anchor_time(playbook, now)
        try:
            self._value_ctx = ValueContext(
                now=self._anchor, timezone=playbook.guidelines.timezone,
                phone_region=phone_region(playbook, self._call), language=language_of(playbook),
            )
        except ValueError as exc:
            raise ConfigError([Problem("policies.phone_region", str(exc))]) from exc
        self._call_start = check_call_start(playbook, call_start, self._value_ctx)
        self.log = EventLog()
        self.state = ConversationState(playbook)
        self._sink: list[Event] | None = None
        check_python_tools(playbook, python_tools)
        self._runner = ToolRunner(playbook, env=self._env, http_client=http_client,
                                  python_tools=python_tools)
        self._progress = Progress(playbook, self.state, self._emit, self._runner, self._env)
        self._speaker = Speaker(playbook, self.state, self._emit, talker, self._progress,
                                token_budget=token_budget)
        self._flow = TurnFlow(self)
        self._started = False
        # Set once the start has adopted the stored log or logged session_start (and settled
        # the first checkpoint): turns wait for it, since ``_started`` is set before that.
        self._start_ready: asyncio.Event | None = None
        self._started_wall: float | None = None
        self._inflight: asyncio.Future[Any] | None = None  # what the next turn waits for first
        self._undelivered: list[Segment] = []  # due lines a stopped reply did not speak
        self._persisted = 0
        self._live: tuple[Reply, asyncio.Task[None] | None] | None = None  # the open stream
        self._persist_task: asyncio.Task[None] | None = None
        self.last_turn: Turn | None = None

    # --- public reading -----------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return str(self._call["session_id"])

    @property
    def ended(self) -> bool:
        return self.state.ended

    # --- the one way anything changes ---------------------------------------------------

    def _emit(self, event: Event) -> Event:
        """Append to the log and apply to the state at once (the next line sees the change)."""
        self.log.append(event)
        self.state.apply(event)
        self._progress.observe(event)
        if self._sink is not None:
            self._sink.append(event)
        return event

    # --- opening ------------------------------------------------------------------------

    async def start(self, speak: bool = True) -> Turn:
        """Begin the call; with ``speak`` the opening is spoken (verbatim line, else the Talker)."""
        return await self._drain(self._start_stream(speak))

    async def stream_start(self) -> AsyncIterator[str]:
        """``start()``, streamed."""
        async with aclosing(self._start_stream(True)) as pieces:
            async for piece in pieces:
                yield piece

    async def _start_stream(self, speak: bool) -> AsyncIterator[str]:
        if self._started:
            raise RuntimeError("start() was already called: a Runtime runs one conversation")
        self._started = True
        ready = self._start_ready = asyncio.Event()
        reply = self._speaker.new_reply()
        self._sink = []
        self._live = (reply, None)
        completed = False
        try:
            if await self._resume():
                completed = True
                return
            self._emit(SessionStart(
                session_id=self.session_id, playbook_hash=cached_playbook_hash(self.playbook),
                anchor=self._anchor.isoformat(), timezone=self.playbook.guidelines.timezone,
                call=dict(self._call), env_keys=sorted(self._env),
            ))
            self._started_wall = time.time()
            for key, value in self._call_start.items():
                self._emit(SlotWrite(key=key, value=value, status="confirmed", by="call_start"))
            self._progress.advance(self.playbook.initial_ref, rule_id="init", by="init")
            await self._progress.settle()
            warm_values_once(self.playbook)
            ready.set()  # a turn may run from here on (it supersedes the opening's speech)
            lines = self._progress.take_lines()
            if speak:
                self._undelivered = lines
                async with aclosing(self._flow.finish_reply(reply, opening=True)) as pieces:
                    async for piece in pieces:
                        yield piece
            completed = True
        finally:
            if self.log.version == 0:
                self._started = False  # nothing was logged (the store failed): a turn retries
            ready.set()
            self._close(reply, completed, task=None)

    async def _resume(self) -> bool:
        """Adopt the stored log of this session, if there is one (worker failover)."""
        if self._store is None:
            return False
        loaded = self._store.load(self.session_id)
        if inspect.isawaitable(loaded):
            loaded = await loaded
        if loaded is None or len(loaded) == 0:
            return False
        self.log = loaded
        self.state = ConversationState.fold(loaded, self.playbook)
        self._progress.state = self._speaker.state = self.state
        self._persisted = loaded.version
        self._started_wall = loaded[0].at or time.time()
        return True

    async def _before_turn(self, *, patience: float = 0.0) -> None:
        """Let the previous decision (and its late lines) land first, then make sure we started.

        A stream still open is superseded (the caller spoke over it); an external event waits
        up to ``patience`` seconds for it to finish first, since nobody interrupted it. A start
        still loading the store (or settling the first checkpoint) is waited for first.
        """
        ready = self._start_ready
        if ready is not None and not ready.is_set():
            await ready.wait()
        live = self._live
        if live is not None and patience > 0:
            closed = asyncio.get_running_loop().create_future()
            live[0].on_close.append(closed)
            await finished(closed, patience)
        if self._live is not None:
            self._supersede(*self._live)
        if self._inflight is not None:
            await finished(self._inflight, None)
            self._inflight = None
        if not self._started:
            await self._drain(self._start_stream(False))

    # --- turns --------------------------------------------------------------------------

    async def user_turn(self, text: str) -> Turn:
        """A whole user turn: the caller said ``text``; returns what was said back."""
        return await self._drain(self.stream_turn(text))

    async def stream_turn(self, text: str) -> AsyncIterator[str]:
        """The same turn, streamed. Close the stream (``aclose``) when you stop early."""
        if not isinstance(text, str):
            raise TypeError(f"user text must be a string, not {type(text).__name__}")
        await self._before_turn()
        reply = self._speaker.new_reply()
        self._sink = []
        self._live = (reply, None)
        completed = False
        task: asyncio.Task[None] | None = None
        try:
            if self.state.ended:  # post-terminal: log the words, answer with silence
                self._emit(Utterance(role="user", text=text))
                completed = True
                return
            user = self._emit(Utterance(role="user", text=text))
            if self._flow.over_time():
                async with aclosing(self._flow.time_up(reply)) as pieces:
                    async for piece in pieces:
                        yield piece
                completed = True
                return
            task = asyncio.get_running_loop().create_task(
                self._decide_after_talker(text, user.version),
                name=f"director:{self.session_id}:{user.version}")
            self._live = (reply, task)
            async with aclosing(self._flow.reply(reply, task)) as pieces:
                async for piece in pieces:
                    yield piece
            completed = True
        finally:
            self._close(reply, completed, task)

    async def _decide_after_talker(self, text: str, user_version: int) -> None:
        """The turn's decision, one loop step late: the reply issues its Talker request in the
        step that created this task, so yielding once lets that request go out before the
        Director's prompt is built (SPEC §14: time to first token)."""
        await asyncio.sleep(0)
        await self._flow.decide(text, user_version)

    async def external(self, kind: str, name: str, payload: Mapping[str, Any] | None = None) -> Turn:
        """An outside event: ``silence`` (policies.silence) or a handler's ``<kind>.<name>``."""
        return await self._drain(self._external_stream(kind, name, dict(payload or {})))

    async def time_up(self) -> Turn:
        """``policies.max_call_seconds`` has passed (a host's timer fired): a hard stop.

        Logged as the external event ``timer``/``max_call_seconds``; the call ends with outcome
        ``timeout`` and its closing line is returned (nothing when the call had already ended).
        A reply still streaming is let finish first (up to 30 s), like any external event.
        """
        return await self._drain(
            self._external_stream("timer", "max_call_seconds", {}, time_up=True))

    def seconds_left(self) -> float | None:
        """Seconds until ``policies.max_call_seconds`` (``None``: no limit, or not started)."""
        limit = self.playbook.policies.max_call_seconds
        if limit is None or self._started_wall is None:
            return None
        return max(limit - (time.time() - self._started_wall), 0.0)

    async def _external_stream(self, kind: str, name: str, payload: dict[str, Any], *,
                               time_up: bool = False) -> AsyncIterator[str]:
        await self._before_turn(patience=EXTERNAL_PATIENCE)
        reply = self._speaker.new_reply()
        self._sink = []
        self._live = (reply, None)
        completed = False
        try:
            self._emit(External(kind=kind, name=name, payload=payload))
            if not self.state.ended:
                if time_up or self._flow.over_time():
                    source = self._flow.time_up(reply)
                elif kind == "silence":
                    source = self._flow.silence(reply)
                else:
                    source = self._flow.handler(reply, kind, name, payload)
                async with aclosing(source) as pieces:
                    async for piece in pieces:
                        yield piece
            completed = True
        finally:
            self._close(reply, completed, task=None)

    # --- corrections --------------------------------------------------------------------

    def mark_heard(self, utterance_version: int, heard_text: str) -> Event:
        """The caller heard only ``heard_text`` of the assistant utterance at that version."""
        entry = self.state.entry(utterance_version)
        if entry is None or entry.role != "assistant":
            raise ValueError(
                f"mark_heard: version {utterance_version} is not an assistant utterance of this "
                "call; pass the version of the Utterance event the caller was hearing"
            )
        if not isinstance(heard_text, str):
            raise TypeError(f"heard_text must be a string, not {type(heard_text).__name__}")
        event = self._emit(SpeechCorrection(utterance_version=utterance_version, heard_text=heard_text))
        self._persist()
        return event

    def withdraw(self, slot: str) -> list[Event]:
        """Re-open a confirmed value: it goes back to provisional and is read back again."""
        if slot not in self.state.slots:
            filled = ", ".join(sorted(self.state.slots)) or "none"
            raise ValueError(f"withdraw: slot {slot!r} has no value (filled slots: {filled})")
        events = [self._emit(e) for e in plan_withdraw(self.state, self.playbook, slot)]
        self._persist()
        return events

    # --- ending a turn ------------------------------------------------------------------

    def _supersede(self, reply: Reply, task: asyncio.Task[None] | None) -> None:
        """A new turn began while the previous stream was still open: treat it as a barge-in.

        Its yielded prefix is logged now (interrupted); it stops yielding when next resumed,
        and its decision still lands, before the new turn's.
        """
        reply.abort()
        reply.superseded = True
        self._live = None
        self._sink = None
        if task is not None:
            self._inflight = asyncio.get_running_loop().create_task(
                self._flow.deliver_late(task, barge_in=True)
            )

    async def _drain(self, stream: AsyncIterator[str]) -> Turn:
        async with aclosing(stream) as pieces:  # type: ignore[type-var]
            async for _ in pieces:
                pass
        assert self.last_turn is not None
        return self.last_turn

    def _close(self, reply: Reply, completed: bool, task: asyncio.Task[None] | None) -> None:
        """Log a barge-in's prefix, hand a cut reply's lines to late delivery, record the turn."""
        for waiter in reply.on_close:
            if not waiter.done():
                waiter.set_result(None)
        if reply.superseded:
            return  # the newer turn settled this one when it took over
        self._live = None
        if not completed:
            reply.abort()
        if task is not None and (reply.cut or reply.stopped):
            self._inflight = asyncio.get_running_loop().create_task(
                self._flow.deliver_late(task, barge_in=reply.stopped and not reply.cut)
            )
        elif task is not None:
            self._inflight = task
        self.last_turn = Turn(
            text=reply.text, checkpoint=self.state.checkpoint, ended=self.state.ended,
            outcome=self.state.outcome, events=self._sink or [], interruptible=reply.interruptible,
        )
        self._sink = None
        self._persist()

    # --- persistence --------------------------------------------------------------------

    def _persist(self) -> None:
        """Hand new events to the store off the loop, in order, after the reply was streamed."""
        if self._store is None or self.log.version <= self._persisted:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a sync caller): the next turn persists these events too
        events = self.log.since(self._persisted)
        self._persisted = self.log.version
        self._persist_task = loop.create_task(self._append(self._persist_task, events))

    async def _append(self, previous: asyncio.Task[None] | None, events: list[Event]) -> None:
        if previous is not None:
            await finished(previous, None)
        try:
            await self._store.append(self.session_id, events)
        except Exception:
            # Not silent: logged loudly, and the events are offered again with the next batch.
            logger.exception("session %s: storing %d events failed", self.session_id, len(events))
            self._persisted = min(self._persisted, events[0].version - 1)

    async def wait_idle(self) -> None:
        """Wait for everything this runtime still runs: a decision, late lines, persistence."""
        while True:
            pending = [t for t in (self._inflight, self._persist_task) if t is not None and not t.done()]
            if not pending:
                return
            await asyncio.wait(pending)


__all__ = ["Runtime", "Turn"]
