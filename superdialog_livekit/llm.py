"""``DialogMachineLLM``: a real ``livekit.agents.llm.LLM`` that runs a playbook (SPEC §10).

LiveKit calls ``chat(chat_ctx=...)`` for every reply. The stream syncs the event log with the
context by message id (new user messages are logged once; interrupted assistant messages
become ``speech_correction`` events with the heard text), asks the ``Runtime`` for the reply
and forwards its text as ``ChatChunk``s, then a usage chunk. One instance per call.

Two user messages arriving together (LiveKit replaced nothing, the caller just spoke twice
before a reply could start) run as consecutive turns: both are logged and decided in order,
and the reply to the earlier one, which nobody will hear, is recorded as heard empty.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import msgspec
from livekit.agents import APIConnectOptions, llm, utils
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, NOT_GIVEN, NotGivenOr
from superdialog_core.events import Utterance
from superdialog_core.playbook import Playbook

from .adapters import LiveKitDirector, LiveKitTalker, UsageTally, current_usage
from .replies import ReplyPlanner
from .sync import SpeechSync
from .uris import resolve_llm

logger = logging.getLogger("superdialog_livekit")

@dataclass
class DialogEvent:
    """What ``DialogMachineLLM`` emits as ``"superdialog_event"``: a logged event or a metric.

    ``kind`` is the log event's type (``verdict``, ``slot_write``, ``advance``...) or one of
    ``director_call`` (latency_ms, answered_with) and ``ended`` (outcome).
    """

    kind: str
    data: dict[str, Any] = field(default_factory=dict)


def _speech_handle() -> Any | None:
    """The SpeechHandle that owns the current reply (inherited context var; private in 1.8.9)."""
    try:
        from livekit.agents.voice.agent_activity import _SpeechHandleContextVar
    except ImportError:  # pragma: no cover - a LiveKit release that moved it
        return None
    return _SpeechHandleContextVar.get(None)


async def _until_committed(handle: Any) -> None:
    """Wait until LiveKit commits to this reply's speech (schedules it).

    A preemptive generation runs before the caller's turn is confirmed, on a transcript that
    may still change; LiveKit schedules its speech only once the turn is confirmed, and cancels
    it otherwise. Waiting here means the engine never logs words, runs the Director on them, or
    streams a reply for a turn the caller did not finish: a discarded attempt leaves no trace.
    """
    while not handle.scheduled:
        await asyncio.sleep(0.005)  # SpeechHandle has no public "scheduled" future


def _python_tools(playbook: Playbook, given: Mapping[str, Any] | None) -> Any:
    """``given``, else the tools ``$SUPERDIALOG_TOOLS`` or the playbook's sidecar file define.

    The same lookup as ``chat`` and ``worker.py`` (``superdialog_core.tools.discovery``); the
    result remembers where it looked, so the runtime's refusal of a missing tool can say so.
    """
    from superdialog_core.tools.discovery import find_python_tools

    found = find_python_tools(playbook.source_path, given)
    if given is None and found.source is not None:
        logger.info("python tools from %s: %s", found.source, ", ".join(sorted(found)) or "none")
    return found


def _as_model(model: Any, *, role: str, base_url: str | None) -> Any:
    """A LiveKit LLM or URI wrapped for the engine; an engine model (``.speak``/``.decide``) as is."""
    if role == "talker" and hasattr(model, "speak") and not isinstance(model, llm.LLM):
        return model
    if role == "director" and hasattr(model, "decide") and not isinstance(model, llm.LLM):
        return model
    return resolve_llm(model, base_url=base_url, role=role)


class DialogMachineLLM(llm.LLM[Literal["superdialog_event"]]):
    """Runs one call's playbook behind LiveKit's LLM interface.

    ``talker`` and ``director`` are LiveKit LLMs or model URIs (the director defaults to the
    talker). ``session_id`` with a ``store`` that holds its log resumes the call (no opening).
    ``call_start``/``call`` values can be set until the first turn (``set_call``).
    """

    def __init__(
        self,
        playbook: str | Path | Playbook,
        *,
        talker: Any,
        director: Any = None,
        python_tools: Mapping[str, Any] | None = None,
        call_start: Mapping[str, Any] | None = None,
        call: Mapping[str, Any] | None = None,
        store: Any = None,
        session_id: str | None = None,
        now: datetime | None = None,
        barrier_timeout: float = 0.4,
        hold_timeout: float | None = None,
        director_timeout: float = 8.0,
        token_budget: int = 4000,
        http_client: Any = None,
        base_url: str | None = None,
    ) -> None:
        super().__init__()
        self._playbook = playbook if isinstance(playbook, Playbook) else Playbook.load(playbook)
        python_tools = _python_tools(self._playbook, python_tools)
        talker_model = _as_model(talker, role="talker", base_url=base_url)
        director_model = (
            talker_model if director is None and isinstance(talker_model, llm.LLM)
            else _as_model(talker if director is None else director, role="director",
                           base_url=base_url)
        )
        self._talker_llm = talker_model if isinstance(talker_model, llm.LLM) else None
        # LLMs this instance built from URIs are its own to close; those passed in are not.
        self._owned = [m for given, m in ((talker, talker_model), (director, director_model))
                       if isinstance(given, str) and isinstance(m, llm.LLM)]
        if director is None and isinstance(talker, str) and isinstance(talker_model, llm.LLM):
            self._owned.append(talker_model)  # one client serves both roles
        self._models = [m for m in {id(talker_model): talker_model,
                                    id(director_model): director_model}.values()
                        if isinstance(m, llm.LLM)]
        self._talker = LiveKitTalker(talker_model) if isinstance(talker_model, llm.LLM) else talker_model
        self._director = (
            LiveKitDirector(director_model, on_call=self._director_called)
            if isinstance(director_model, llm.LLM) else director_model
        )
        self._options: dict[str, Any] = {
            "python_tools": python_tools, "store": store, "now": now,
            "barrier_timeout": barrier_timeout, "hold_timeout": hold_timeout,
            "director_timeout": director_timeout, "token_budget": token_budget,
            "http_client": http_client,
        }
        self._call_start = dict(call_start or {})
        self._call = dict(call or {})
        self._session_id = session_id
        self._runtime: Any = None
        self._check_start_values()
        self.speech = SpeechSync(lambda: self.runtime, on_settled=self._publish)
        self.replies = ReplyPlanner(lambda: self.runtime, self.speech, store)
        self._interruptible: dict[str, bool] = {}  # checkpoint ref -> its interruptible flag
        self._published = 0  # last log version emitted as a DialogEvent
        self._ended_fired = False
        self.on_ended: list[Callable[[Any], None]] = []  # DialogAgent: end the call after playout

    # -- identity -------------------------------------------------------------------------------

    @property
    def model(self) -> str:
        return self._talker_llm.model if self._talker_llm is not None else "scripted"

    @property
    def provider(self) -> str:
        return "superdialog"

    @property
    def playbook(self) -> Playbook:
        return self._playbook

    # -- the runtime ----------------------------------------------------------------------------

    @property
    def runtime(self) -> Any:
        """The call's ``superdialog_core.Runtime``; built on first use, which freezes call values.

        Raises ``CallStartError``/``ConfigError`` (every problem listed) if it cannot start.
        """
        if self._runtime is None:
            from superdialog_core import Runtime

            call = dict(self._call)
            session_id = self._session_id or call.pop("session_id", None)
            call.pop("session_id", None)
            self._runtime = Runtime(
                self._playbook, director=self._director, talker=self._talker,
                call_start=self._call_start or None, call=call or None, session_id=session_id,
                on_late_line=self._late_line, **self._options,
            )
        return self._runtime

    @property
    def session_id(self) -> str:
        return str(self.runtime.session_id)

    @property
    def resumed(self) -> bool:
        """True when ``prepare()`` found this session's log in the store (failover)."""
        return self.replies.resumed

    async def prepare(self) -> bool:
        """Build the runtime and adopt this session's stored log, if any (see ``ReplyPlanner``)."""
        return await self.replies.prepare()

    def hold_turns(self) -> None:
        """Hold caller turns until ``decide_start`` (see ``ReplyPlanner.hold_turns``)."""
        self.replies.hold_turns()

    def decide_start(self, mode: Literal["speak", "silent", "resumed"]) -> bool:
        """Release held turns; True when the opening reply should be generated now."""
        return self.replies.decide_start(mode)

    async def start_silently(self) -> None:
        """Start without speaking (an outbound call waits for the callee's first words)."""
        await self.replies.start_silently()

    @property
    def call_values(self) -> dict[str, Any]:
        """The call.* values: as configured until the call starts, then as logged."""
        if self._runtime is not None and self._runtime.state.call:
            return dict(self._runtime.state.call)
        return dict(self._call)

    @property
    def started(self) -> bool:
        return self._runtime is not None

    def set_call(self, values: Mapping[str, Any] | None = None, *,
                 call_start: Mapping[str, Any] | None = None) -> None:
        """Set ``call.*`` values (SIP attributes arrive after the job starts) or call-start values.

        Only before the first turn: afterwards the session_start event has recorded them.
        """
        if self._runtime is not None:
            raise RuntimeError(
                "call values can only be set before the first turn; set them before "
                "session.start() or before reading .runtime"
            )
        call, start = dict(self._call), dict(self._call_start)
        self._call.update(values or {})
        self._call_start.update(call_start or {})
        try:
            self._check_start_values()
        except ValueError:
            self._call, self._call_start = call, start  # nothing is saved from a refused batch
            raise

    def _check_start_values(self) -> None:
        """Refuse at construction what the runtime would refuse at the first reply.

        Unset ``${VARS}`` and python tools with no implementation (ConfigError), unknown call.*
        names and call-start values that do not fit (CallStartError), each listing every
        problem, before the caller hears anything.
        """
        from superdialog_core.turn.startup import (
            anchor_time,
            check_call_start,
            check_call_values,
            check_python_tools,
            language_of,
            phone_region,
            resolve_env,
        )
        from superdialog_core.values.coerce import ValueContext

        resolve_env(self._playbook)
        check_python_tools(self._playbook, self._options["python_tools"])
        call = check_call_values({k: v for k, v in self._call.items() if k != "session_id"}, "-")
        if self._call_start:
            ctx = ValueContext(now=anchor_time(self._playbook, self._options["now"]),
                               timezone=self._playbook.guidelines.timezone,
                               phone_region=phone_region(self._playbook, call),
                               language=language_of(self._playbook))
            check_call_start(self._playbook, self._call_start, ctx)

    # -- LiveKit LLM interface ------------------------------------------------------------------

    def chat(
        self,
        *,
        chat_ctx: llm.ChatContext,
        tools: list[llm.Tool] | None = None,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
        parallel_tool_calls: NotGivenOr[bool] = NOT_GIVEN,
        tool_choice: NotGivenOr[llm.ToolChoice] = NOT_GIVEN,
        extra_kwargs: NotGivenOr[dict[str, Any]] = NOT_GIVEN,
    ) -> DialogStream:
        # The playbook runs its own tools; LiveKit tools, tool_choice and kwargs are ignored.
        # A reply is not idempotent (its turn is logged once), so LiveKit must never rerun
        # _run: no retries, whatever the session's conn_options say.
        return DialogStream(self, chat_ctx=chat_ctx, tools=tools or [],
                            conn_options=APIConnectOptions(max_retry=0, timeout=conn_options.timeout))

    async def _prewarm_impl(self) -> None:
        # Open the models' connections before the first reply (LiveKit's prewarm contract).
        for model in self._models:
            model.prewarm()

    async def aclose(self) -> None:
        self._publish()
        for model in {id(m): m for m in self._owned}.values():
            await model.aclose()
        await super().aclose()

    # -- plumbing used by the stream and by DialogAgent -----------------------------------------

    def _director_called(self, record: Any) -> None:
        self.emit("superdialog_event", DialogEvent("director_call", {
            "latency_ms": round(record.latency_ms, 1), "answered_with": record.answered_with,
        }))

    def _publish(self) -> None:
        """Emit every log event not emitted yet (slot writes, advances, verdicts...)."""
        if self._runtime is None:
            return
        log = self._runtime.log
        while self._published < log.version:
            self._published += 1
            event = log.get(self._published)
            if event is not None:
                data = msgspec.to_builtins(event)
                self.emit("superdialog_event", DialogEvent(str(data.pop("type", "event")), data))

    def observe_message(self, message: Any) -> None:
        """A ``conversation_item_added`` assistant message: correct heard text at once."""
        if self._runtime is not None:
            self.speech.observe_message(message)

    def bind_session(self, session: Any) -> None:
        """Let this LLM speak lines outside a reply (late lines) with ``session.say``.

        ``DialogAgent`` does this on enter; with a plain ``Agent``, call it after
        ``session.start``.
        """
        self.speech.session = session

    def say_line(self, text: str, utterances: list[Utterance] | None = None, *,
                 interruptible: bool | None = None) -> Any:
        """Speak a line the runtime already logged with ``session.say``; see ``SpeechSync``."""
        if interruptible is None:
            ref = self.runtime.state.checkpoint
            interruptible = bool(not ref or self._playbook.checkpoint(ref).interruptible)
        return self.speech.say_line(text, utterances, interruptible=interruptible)

    def _late_line(self, text: str) -> None:
        """The runtime's on_late_line (the line is logged already): speak it now.

        Raising (no session bound) lets the runtime record that nobody heard it.
        """
        handle = self.say_line(text)
        if self.runtime.state.ended:
            self._ended(handle)

    def _ended(self, handle: Any) -> None:
        if self._ended_fired:
            return
        self._ended_fired = True
        state = self.runtime.state
        self.emit("superdialog_event", DialogEvent("ended", {"outcome": state.outcome}))
        for callback in list(self.on_ended):
            callback(handle)

    def guard_interruptible(self, handle: Any) -> None:
        """Disallow interruptions on the speech once it speaks an ``interruptible: false`` line.

        Runs for every streamed piece, so the checkpoint's flag is looked up once per checkpoint.
        """
        if handle is None:
            return
        ref = self._runtime.state.checkpoint if self._runtime is not None else None
        if not ref:
            return
        interruptible = self._interruptible.get(ref)
        if interruptible is None:
            interruptible = self._interruptible[ref] = bool(self._playbook.checkpoint(ref).interruptible)
        if not interruptible and handle.allow_interruptions and not handle.interrupted:
            handle.allow_interruptions = False


class DialogStream(llm.LLMStream):
    """One reply: the runtime's text as ChatChunks, then a usage chunk."""

    # A delegating stream, like LiveKit's FallbackAdapter: the Talker's own stream records the
    # model call (and its attempt) in its own spans, and this stream never retries, so it opens
    # no attempt span of its own: one span less between llm_node and the Talker's chat() call.
    _llm_attempt_span_name = None

    def __init__(self, owner: DialogMachineLLM, **kwargs: Any) -> None:
        super().__init__(owner, **kwargs)
        self._owner = owner
        self._retry_on_chunk_sent = False  # never rerun a turn: it is logged once

    async def _run(self) -> None:
        owner = self._owner
        request_id = utils.shortuuid("sd_")
        handle = _speech_handle()
        if handle is not None and not handle.scheduled:
            await _until_committed(handle)  # preemptive: cancelled here if LiveKit drops it
        plan = owner.replies.plan(self._chat_ctx)
        rt = owner.runtime
        after = rt.log.version
        delivery = owner.speech.ledger.open("stream")
        tally = UsageTally()
        token = current_usage.set(tally)
        source: Any = None
        try:
            source = await owner.replies.open_reply(plan)
            if source is not None:
                async for piece in source:
                    if not piece:
                        continue
                    self._event_ch.send_nowait(llm.ChatChunk(
                        id=request_id, delta=llm.ChoiceDelta(role="assistant", content=piece)))
                    # After the send (LiveKit reads the chunk only once we yield to the loop),
                    # so the first token is not held back by bookkeeping.
                    delivery.add(piece)
                    owner.guard_interruptible(handle)
        except asyncio.CancelledError:
            # Barge-in, a dropped generation or session close: stop the Talker now (aclose
            # below); the runtime keeps the Director running and logs only what was yielded.
            delivery.cancelled = True
            raise
        finally:
            current_usage.reset(token)
            if source is not None:
                await source.aclose()
            if plan[0] == "opening":
                owner.replies.opening_finished()
            delivery.closed = True
            owner.speech.attach_utterances(delivery, after)
            owner.speech.track_speech(delivery, handle, after)
            owner._publish()
            if rt.state.ended:
                owner._ended(handle)
        self._event_ch.send_nowait(llm.ChatChunk(id=request_id, usage=tally.as_usage()))


__all__ = ["DialogEvent", "DialogMachineLLM", "DialogStream"]
