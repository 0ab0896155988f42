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
import hashlib
import inspect
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ConfigError, Problem
from ..format.playbook import Playbook
from ..log.eventlog import EventLog, LogCorruptError
from ..log.events import (
    Degraded,
    Event,
    External,
    FunctionCall,
    FunctionResult,
    LogRepaired,
    SessionStart,
    SlotWrite,
    SpeechCorrection,
    SteeringNote,
    Utterance,
)
from ..log.slots import plan_withdraw
from ..log.state import ConversationState
from ..log.stores import StoreConflict
from ..values.clean import ValueTooLarge, clean_text, clean_value, replaced_detail, string_too_long
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
from .tracing import CallTracing, trace_tools
from .turnflow import TurnFlow

if TYPE_CHECKING:
    import httpx
    from opentelemetry.trace import Tracer

    from ..log.stores import LogStore
    from ..roles.models import DirectorModel, TalkerModel

logger = logging.getLogger("superdialog_core.runtime")

# How long an external event (webhook, timer, silence) waits for a reply still streaming.
EXTERNAL_PATIENCE = 30.0
# A failed append is retried after 0.25 s, then twice as long each time, at most 4 s apart
# (policies.store_failure.after = 8 attempts: about 16 s of an unreachable store).
STORE_RETRY_FIRST = 0.25
STORE_RETRY_MAX = 4.0
# Once the call has ended, the writer gives up after this many more failed attempts (~30 s).
STORE_ATTEMPTS_AFTER_END = 8


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
    became due after a reply ended (logged once, just before the call). ``tracer`` (an
    OpenTelemetry tracer; default: the global provider's) gets a span per turn with the
    Director call, each Talker segment and each tool call as children (``tracing.py``).

    Persistence: after each reply the new events go to the store in order, in the background.
    A failing append is logged and retried with backoff while the call goes on; after
    ``policies.store_failure.after`` failed attempts in a row the call speaks the policy's
    line and ends. ``StoreConflict`` (another worker appended to this call) stops this
    runtime writing, and its next turn raises it.
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
        tracer: Tracer | None = None,
        talker_errors: Literal["recover", "raise"] = "recover",
    ) -> None:
        # httpx and the tool runner are imported by the first Runtime, not with the package.
        from ..tools.runner import ToolRunner

        if not isinstance(playbook, Playbook):
            playbook = Playbook.load(playbook)
        problems = check_options(director, talker, barrier_timeout, hold_timeout,
                                 director_timeout, token_budget)
        if talker_errors not in ("recover", "raise"):
            problems.append(Problem("talker_errors", f"must be 'recover' or 'raise', got "
                                    f"{talker_errors!r}"))
        if problems:
            raise ConfigError(problems)
        self.playbook = playbook
        self._tracing = CallTracing(tracer)
        self._director = self._tracing.director(director)
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
        trace_tools(self._runner, self._tracing)
        self._progress = Progress(playbook, self.state, self._emit, self._runner, self._env)
        self._speaker = Speaker(playbook, self.state, self._emit, self._tracing.talker(talker),
                                self._progress, token_budget=token_budget,
                                raise_errors=talker_errors == "raise")
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
        self._persist_task: asyncio.Task[None] | None = None  # the store writer, when running
        self._store_failures = 0  # failed appends in a row
        self._store_conflict: StoreConflict | None = None
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

    async def stream_start(self, *, instructions: str | None = None,
                           context: list[dict[str, Any]] | None = None) -> AsyncIterator[str]:
        """``start()``, streamed. ``instructions``: the host's words for the opening (a steering
        note of kind ``instruction``); ``context``: lines said before this engine had the call
        (``Utterance`` fields: role, text, kind, agent, message_id). Both are logged after
        ``session_start``, before the opening."""
        async with aclosing(self._start_stream(True, instructions, context)) as pieces:
            async for piece in pieces:
                yield piece

    async def _start_stream(self, speak: bool, instructions: str | None = None,
                            context: list[dict[str, Any]] | None = None) -> AsyncIterator[str]:
        if self._started:
            raise RuntimeError("start() was already called: a Runtime runs one conversation")
        self._started = True
        ready = self._start_ready = asyncio.Event()
        reply = self._speaker.new_reply()
        self._sink = []
        self._live = (reply, None)
        completed = False
        span = self._begin_span("opening")
        try:
            resumed = await self._resume()
            if resumed and self.state.checkpoint is not None:
                completed = True
                return
            if not resumed:
                self._emit(SessionStart(
                    session_id=self.session_id, playbook_hash=cached_playbook_hash(self.playbook),
                    anchor=self._anchor.isoformat(), timezone=self.playbook.guidelines.timezone,
                    call=dict(self._call), env_keys=sorted(self._env),
                ))
                self._started_wall = time.time()
            # A log cut before its first advance (a crash during the start) re-runs the rest
            # of the start: the call_start values it has not logged yet, then the init advance.
            for key, value in self._call_start.items():
                if key not in self.state.slots:
                    self._emit(SlotWrite(key=key, value=value, status="confirmed", by="call_start"))
            self._progress.advance(self.playbook.initial_ref, rule_id="init", by="init")
            await self._progress.settle()
            warm_values_once(self.playbook)
            ready.set()  # a turn may run from here on (it supersedes the opening's speech)
            lines = self._progress.take_lines()
            for line in context or ():
                self._emit(Utterance(**line))
            if instructions:
                self._emit(SteeringNote(text=instructions, kind="instruction"))
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
            self._end_span(span, None)

    async def _resume(self) -> bool:
        """Adopt the stored log of this session, if there is one (worker failover)."""
        if self._store is None:
            return False
        repaired = None
        try:
            loaded = self._store.load(self.session_id)
            if inspect.isawaitable(loaded):
                loaded = await loaded
        except LogCorruptError as exc:
            if not exc.torn_tail:
                raise  # damage in the middle stays an error until someone calls repair()
            # A crash cut the last line short: cut it off and say so in the log.
            repaired = self._store.repair(self.session_id)
            if inspect.isawaitable(repaired):
                repaired = await repaired
            loaded = repaired.log if repaired is not None else None
        if loaded is None or len(loaded) == 0:
            return False
        self.log = loaded
        self.state = ConversationState.fold(loaded, self.playbook)
        self._progress.state = self._speaker.state = self.state
        self._persisted = loaded.version
        self._started_wall = loaded[0].at or time.time()
        if repaired is not None and repaired.repaired:
            self._emit(LogRepaired(cut_bytes=repaired.cut_bytes, cut_records=repaired.cut_records,
                                   line=repaired.line, reason=repaired.reason))
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
        if self._store_conflict is not None:
            raise self._store_conflict  # another worker runs this call now

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
        span = self._begin_span("turn")
        try:
            if self.state.ended:  # post-terminal: log the words, answer with silence
                self._caller_utterance(text)
                completed = True
                return
            user, text = self._caller_utterance(text)
            if self._store_lost() or self._flow.over_time():
                ending = self._flow.store_failed if self._store_lost() else self._flow.time_up
                async with aclosing(ending(reply)) as pieces:
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
            self._end_span(span, task)

    def _caller_utterance(self, text: str) -> tuple[Event, str]:
        """Log the caller's words at the boundary: valid Unicode, bounded (policies.caps).

        Returns the logged event and the text the models see (at most ``caps.model_chars``).
        Each repair or cut is one event, so the log says what the models did not get.
        """
        caps = self.playbook.policies.caps
        text, replaced = clean_text(text)
        logged = text
        extra: dict[str, Any] = {}
        if string_too_long(text, caps.utterance_bytes) is not None:
            logged = text.encode("utf-8")[: caps.utterance_bytes].decode("utf-8", "ignore")
            extra = {"text_length": len(text),
                     "text_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}
        user = self._emit(Utterance(role="user", text=logged, **extra))
        if replaced:
            self._emit(Degraded(component="caller", detail=replaced_detail("caller", replaced)))
        if extra:
            self._emit(Degraded(component="caller", detail=(
                f"utterance_logged_in_part:{user.version}: {len(text)} characters; the log keeps "
                f"the first {caps.utterance_bytes} bytes, the length and the sha256")))
        if len(text) > caps.model_chars:
            self._emit(Degraded(component="caller", detail=(
                f"utterance_cut_for_models:{user.version}: {len(text)} characters; the models "
                f"see the first {caps.model_chars} (policies.caps.model_chars)")))
            text = text[: caps.model_chars]
        return user, text

    async def _decide_after_talker(self, text: str, user_version: int) -> None:
        """The turn's decision, one loop step late: the reply issues its Talker request in the
        step that created this task, so yielding once lets that request go out before the
        Director's prompt is built (SPEC §14: time to first token)."""
        await asyncio.sleep(0)
        await self._flow.decide(text, user_version)

    async def external(self, kind: str, name: str, payload: Mapping[str, Any] | None = None) -> Turn:
        """An outside event: ``silence`` (policies.silence) or a handler's ``<kind>.<name>``."""
        try:
            cleaned, _ = clean_value(dict(payload or {}), f"{kind}.{name} payload")
        except ValueTooLarge as exc:
            raise ValueError(f"external event refused: {exc.message}") from None
        return await self._drain(self._external_stream(kind, name, cleaned))

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
        span = self._begin_span("external")
        try:
            self._emit(External(kind=kind, name=name, payload=payload))
            if not self.state.ended:
                if self._store_lost():
                    source = self._flow.store_failed(reply)
                elif time_up or self._flow.over_time():
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
            self._end_span(span, None)

    # --- replies without new words from the caller ---------------------------------------

    async def stream_reply(self, *, instructions: str | None = None,
                           decide: tuple[str, int] | None = None) -> AsyncIterator[str]:
        """One Talker segment from the state as it is now, with no new words from the caller.

        For the continuation after a host function tool's result (the same turn: no Director
        call), for a host's ``instructions`` (``generate_reply(instructions=...)``, logged first
        as a steering note of kind ``instruction``), and for the reply when the caller comes
        back from another agent: ``decide`` = (text, version) of a logged user utterance for the
        Director to judge in the background; the reply never waits for it.
        """
        await self._before_turn()
        reply = self._speaker.new_reply()
        self._sink = []
        self._live = (reply, None)
        completed = False
        task: asyncio.Task[None] | None = None
        try:
            if self.state.ended:
                completed = True
                return
            if instructions:
                self._emit(SteeringNote(text=instructions, kind="instruction"))
            if decide is not None:
                task = asyncio.get_running_loop().create_task(
                    self._decide_after_talker(*decide),
                    name=f"director:{self.session_id}:{decide[1]}")
                self._live = (reply, task)
            async with aclosing(self._speaker.talker_segment(reply, "reply")) as pieces:
                async for piece in pieces:
                    yield piece
            completed = True
        finally:
            self._close(reply, completed, task)

    async def steer(self, text: str, *, kind: Literal["steer", "instruction"] = "instruction") -> Event:
        """Log a steering note for the next Talker render (the host's instructions)."""
        await self._ensure_started()
        event = self._emit(SteeringNote(text=text, kind=kind))
        self._persist()
        return event

    async def _ensure_started(self) -> None:
        """Started (silently if need be), without touching a reply that is streaming."""
        ready = self._start_ready
        if ready is not None and not ready.is_set():
            await ready.wait()
        if not self._started:
            await self._drain(self._start_stream(False))

    async def log_line(self, role: Literal["user", "assistant"], text: str, *,
                       kind: str | None = None, agent: str | None = None,
                       message_id: str | None = None) -> Event:
        """Log a line this engine did not produce, as it was heard: the host's ``say`` (kind
        ``say``), another agent's lines while it had the call (``agent`` set; its user lines
        are context, not turns), a fallback model's reply (kind ``fallback``). Nothing runs."""
        await self._ensure_started()
        event = self._emit(Utterance(
            role=role, text=text, kind=kind if role == "assistant" else None, agent=agent,
            message_id=message_id,
            spoke_from_version=self.state.version if role == "assistant" else None))
        self._persist()
        return event

    async def answered_turn(self, user_text: str, reply_text: str | None, *,
                            agent: str | None = None, message_id: str | None = None) -> None:
        """A caller turn a fallback model answered (this engine's Talker was down).

        The caller's words and the fallback's reply (kind ``fallback``) are logged, and the
        Director decides the turn as usual, in the background; lines that become due wait for
        the next reply (a call it ended gets its closing line through ``on_late_line``).
        """
        await self._before_turn()
        user = self._emit(Utterance(role="user", text=user_text, message_id=message_id))
        if reply_text:
            self._emit(Utterance(role="assistant", text=reply_text, kind="fallback", agent=agent,
                                 spoke_from_version=self.state.version))
        if not self.state.ended:
            task = asyncio.get_running_loop().create_task(
                self._flow.decide(user_text, user.version),
                name=f"director:{self.session_id}:{user.version}")
            self._inflight = asyncio.get_running_loop().create_task(
                self._flow.deliver_late(task, barge_in=True))
        self._persist()

    def function_call(self, call_id: str, name: str, arguments: str, *,
                      agent: str | None = None) -> Event:
        """Log a host function tool call made outside a Talker segment (another agent's)."""
        event = self._emit(FunctionCall(call_id=call_id, name=name, arguments=arguments,
                                        agent=agent))
        self._persist()
        return event

    def function_result(self, call_id: str, name: str, output: str, *, is_error: bool = False,
                        agent: str | None = None) -> Event:
        """Log what a host function tool returned (the next Talker segment sees it)."""
        event = self._emit(FunctionResult(call_id=call_id, name=name, output=output,
                                          is_error=is_error, agent=agent))
        self._persist()
        return event

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
        heard_text, _ = clean_text(heard_text)  # a prefix of logged text: repaired there already
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
        if self._persist_task is not None and not self._persist_task.done():
            return  # the writer is running: it stores these events too before it stops
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a sync caller): the next turn persists these events too
        self._persist_task = loop.create_task(self._write(), name=f"store:{self.session_id}")

    async def _write(self) -> None:
        """Store every event not stored yet, in order; retry a failing store with backoff.

        Each failure is logged; after ``policies.store_failure.after`` of them in a row the
        call is ended with the policy's line, and the writer keeps trying, so the stored log
        catches up when the store answers again. Once the call has ended it gives up after
        ``STORE_ATTEMPTS_AFTER_END`` more attempts, saying how far the stored log got.
        ``StoreConflict`` stops it at once: another worker owns the call.
        """
        assert self._store is not None
        policy = self.playbook.policies.store_failure
        after_end = 0
        while self.log.version > self._persisted and self._store_conflict is None:
            events = self.log.since(self._persisted)
            try:
                await self._store.append(self.session_id, events)
            except StoreConflict as exc:
                logger.error("session %s: %s", self.session_id, exc)
                self._store_conflict = exc
                return
            except Exception as exc:
                self._store_failures += 1
                failures = self._store_failures
                after_end += self.state.ended
                if after_end > STORE_ATTEMPTS_AFTER_END:
                    logger.error(
                        "session %s: the store still fails after %d attempts; giving up: the "
                        "stored log ends at version %d, the call's log at %d (%s: %s)",
                        self.session_id, failures, self._persisted, self.log.version,
                        type(exc).__name__, exc)
                    return
                delay = min(STORE_RETRY_FIRST * 2 ** (failures - 1), STORE_RETRY_MAX)
                logger.warning(
                    "session %s: storing events %d-%d failed (attempt %d, retrying in %.2g s): "
                    "%s: %s", self.session_id, events[0].version, events[-1].version, failures,
                    delay, type(exc).__name__, exc)
                if failures == policy.after:
                    self._store_lost_between_turns()
                await asyncio.sleep(delay)
                continue
            if self._store_failures:
                logger.warning("session %s: the store answers again after %d failed attempts; "
                               "stored up to version %d", self.session_id, self._store_failures,
                               events[-1].version)
                self._store_failures = 0
            self._persisted = events[-1].version

    def _store_lost(self) -> bool:
        """The store has failed ``policies.store_failure.after`` times in a row."""
        return self._store_failures >= self.playbook.policies.store_failure.after

    def _store_lost_between_turns(self) -> None:
        """The store is lost while nobody speaks: end the call now with the failure line,
        through ``on_late_line`` (without one, or mid-reply, the next turn ends it)."""
        if self._live is not None or self._on_late_line is None or self.state.ended:
            return
        if self._inflight is not None and not self._inflight.done():
            return
        self._inflight = asyncio.get_running_loop().create_task(self._flow.store_failed_late())

    # --- traces -------------------------------------------------------------------------

    def _begin_span(self, kind: str) -> Any:
        return self._tracing.begin(kind, session_id=self.session_id,
                                   checkpoint=self.state.checkpoint, version=self.log.version)

    def _end_span(self, span: Any, task: asyncio.Task[None] | None) -> None:
        """End a turn's span once its decision has landed too (its advances count)."""
        if span is None:
            return
        if task is None or task.done():
            self._tracing.end(span, self.log, self.state)
        else:
            task.add_done_callback(lambda _: self._tracing.end(span, self.log, self.state))

    async def wait_idle(self) -> None:
        """Wait for everything this runtime still runs: a decision, late lines, persistence."""
        while True:
            pending = [t for t in (self._inflight, self._persist_task) if t is not None and not t.done()]
            if not pending:
                return
            await asyncio.wait(pending)


__all__ = ["Runtime", "Turn"]
