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
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import msgspec
from livekit.agents import APIConnectionError, APIConnectOptions, APIError, llm, utils
from livekit.agents.metrics import LLMMetrics
from livekit.agents.metrics.base import Metadata
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, NOT_GIVEN, NotGivenOr
from superdialog_core import TalkerFailed
from superdialog_core.events import Degraded, Utterance
from superdialog_core.playbook import Playbook

from .adapters import (
    LiveKitDirector,
    LiveKitTalker,
    ReplyTools,
    UsageTally,
    current_tools,
    current_usage,
)
from .replies import ReplyPlanner
from .sync import SpeechSync
from .uris import resolve_llm

logger = logging.getLogger("superdialog_livekit")

# LLMMetrics.label of the Director's calls (the Talker's replies carry this LLM's own label).
DIRECTOR_METRICS_LABEL = "superdialog.director"
_PROBE_TASK = "_recover_llm_task"


def _in_recovery_probe() -> bool:
    """True inside a FallbackAdapter's recovery probe (LiveKit 1.8: the task running it is
    ``FallbackLLMStream._try_recovery.<locals>._recover_llm_task``; private, a test pins it)."""
    task = asyncio.current_task()
    if task is None:
        return False
    return getattr(task.get_coro(), "__qualname__", "").endswith(_PROBE_TASK)

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


def livekit_tracer() -> Any:
    """A tracer of LiveKit's tracer provider (``livekit.agents.telemetry.set_tracer_provider``;
    the global one until that is called), so a LiveKit user's exporter receives the engine's
    spans. Resolved per call, so a provider set after import counts. LiveKit's own
    ``telemetry.tracer`` wraps it with a signature bind per span (~0.15 ms here, per turn
    and per child span), so the provider's tracer is asked for directly when it is known."""
    from livekit.agents import telemetry

    provider = getattr(telemetry.tracer, "_tracer_provider", None)
    if provider is None:  # another LiveKit version: its tracer is still the right one
        return telemetry.tracer
    return provider.get_tracer("superdialog_livekit")


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
        on_talker_error: Literal["recover", "raise"] = "recover",
    ) -> None:
        super().__init__()
        if on_talker_error not in ("recover", "raise"):
            raise ValueError(f"on_talker_error must be 'recover' or 'raise', not {on_talker_error!r}; "
                             "'raise' lets a FallbackAdapter around this LLM take over")
        self.on_talker_error = on_talker_error
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
            "http_client": http_client, "talker_errors": on_talker_error,
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
        self._tasks: set[asyncio.Future[Any]] = set()  # observed lines being logged

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
                on_late_line=self._late_line, tracer=livekit_tracer(), **self._options,
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
    ) -> llm.LLMStream:
        # A reply is not idempotent (its turn is logged once), so LiveKit must never rerun
        # _run: no retries, whatever the session's conn_options say. The Agent's function
        # tools (and tool_choice) are offered to the Talker; kwargs are ignored.
        options = APIConnectOptions(max_retry=0, timeout=conn_options.timeout)
        if _in_recovery_probe():
            # A FallbackAdapter checking whether this LLM is back: it asks with the context of
            # a reply that another LLM is giving. Only the Talker is tried; nothing is logged.
            return ProbeStream(self, chat_ctx=chat_ctx, tools=tools or [], conn_options=options)
        return DialogStream(self, chat_ctx=chat_ctx, tools=tools or [], conn_options=options,
                            tool_choice=tool_choice)

    async def _prewarm_impl(self) -> None:
        # Open the models' connections before the first reply (LiveKit's prewarm contract).
        for model in self._models:
            model.prewarm()

    async def aclose(self) -> None:
        if self._tasks:  # observed lines still being logged: let them land first
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._publish()
        for model in {id(m): m for m in self._owned}.values():
            await model.aclose()
        await super().aclose()

    # -- plumbing used by the stream and by DialogAgent -----------------------------------------

    def _director_called(self, record: Any) -> None:
        self.emit("superdialog_event", DialogEvent("director_call", {
            "latency_ms": round(record.latency_ms, 1), "answered_with": record.answered_with,
        }))
        model = getattr(self._director, "llm", None)
        if model is None:
            return
        # The Director's tokens count in session usage under its own provider and model;
        # the label tells its LLMMetrics from the Talker's (this LLM's own label).
        usage = record.usage
        duration = record.latency_ms / 1000.0
        completion = usage.completion_tokens if usage else 0
        self.emit("metrics_collected", LLMMetrics(
            label=DIRECTOR_METRICS_LABEL, request_id=record.request_id or utils.shortuuid("sd_dir_"),
            timestamp=record.started_at or time.time(), duration=duration, ttft=record.ttft_s,
            cancelled=False, completion_tokens=completion,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            prompt_cached_tokens=usage.prompt_cached_tokens if usage else 0,
            cache_creation_tokens=usage.cache_creation_tokens if usage else 0,
            reasoning_tokens=usage.reasoning_tokens if usage else 0,
            total_tokens=usage.total_tokens if usage else 0,
            tokens_per_second=completion / duration if duration > 0 else 0.0,
            metadata=Metadata(model_name=model.model, model_provider=model.provider),
        ))

    def model_failed(self, role: str, detail: str, *, error: BaseException | None = None,
                     logged: bool = True) -> None:
        """A call-level model failure: a ``model_failure`` superdialog_event and LiveKit's own
        (recoverable) LLM ``error`` event, which the session re-emits as its ``error`` event.
        The engine logs the warning for failures it logged; ``logged=False`` warns here."""
        in_a_row = self._runtime.state.model_failures.get(role, 0) if self._runtime else 0
        if not logged:
            logger.warning("the %s failed (the reply is handed to a fallback): %s", role, detail)
        self.emit("superdialog_event", DialogEvent("model_failure", {
            "role": role, "detail": detail, "in_a_row": in_a_row, "logged": logged}))
        self.emit("error", llm.LLMError(timestamp=time.time(), label=self.label,
                                        error=error or RuntimeError(detail), recoverable=True))

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
                if isinstance(event, Degraded) and event.model_failure:
                    self.model_failed(event.component, event.detail)

    def observe_message(self, message: Any) -> None:
        """A ``conversation_item_added`` assistant message: correct heard text at once, and
        log a line this engine did not produce (a ``say``, a fallback's reply) once."""
        if self._runtime is not None and self.speech.observe_message(message):
            session = self.speech.session
            history = session.history if session is not None else None
            plan = self.replies.reconcile(history if history is not None else
                                          llm.ChatContext(items=[message]), history=history)
            if plan.actions:
                task = asyncio.ensure_future(self._log_observed(plan))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _log_observed(self, plan: Any) -> None:
        try:
            await self.replies.log_actions(plan)
        except Exception:
            logger.exception("logging a line this engine did not produce failed")
        self._publish()

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
    """One reply: the runtime's text (and the Talker's function calls) as ChatChunks, then a
    usage chunk."""

    # A delegating stream, like LiveKit's FallbackAdapter: the Talker's own stream records the
    # model call (and its attempt) in its own spans, and this stream never retries, so it opens
    # no attempt span of its own: one span less between llm_node and the Talker's chat() call.
    _llm_attempt_span_name = None

    def __init__(self, owner: DialogMachineLLM, *, tool_choice: Any = NOT_GIVEN,
                 **kwargs: Any) -> None:
        super().__init__(owner, **kwargs)
        self._owner = owner
        self._tool_choice = tool_choice
        self._retry_on_chunk_sent = False  # never rerun a turn: it is logged once

    async def _run(self) -> None:
        owner = self._owner
        request_id = utils.shortuuid("sd_")
        handle = _speech_handle()
        if handle is not None and not handle.scheduled:
            await _until_committed(handle)  # preemptive: cancelled here if LiveKit drops it
        session = owner.speech.session
        history = None
        if session is not None:
            history = session.history
            # The agent asking is this LLM's (no agent running: a chat() outside a session).
            with contextlib.suppress(RuntimeError):
                owner.replies.agent_ids.add(session.current_agent.id)
        plan = owner.replies.plan(self._chat_ctx, history=history)
        rt = owner.runtime
        after = rt.log.version
        delivery = owner.speech.ledger.open("stream")
        tally = UsageTally()
        token = current_usage.set(tally)
        offered = ReplyTools(self._tools, self._tool_choice, self._send_call) if self._tools else None
        tools_token = current_tools.set(offered)
        source: Any = None
        failed: TalkerFailed | None = None
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
        except TalkerFailed as exc:
            failed = exc  # on_talker_error="raise": nothing of this attempt was logged
        finally:
            current_usage.reset(token)
            current_tools.reset(tools_token)
            if source is not None:
                await source.aclose()
            if plan.kind == "opening":
                owner.replies.opening_finished()
            delivery.closed = True
            if failed is not None and not delivery.text:
                # Another LLM answers this reply: its message is not this delivery's.
                owner.speech.ledger.settle_complete(delivery)
            else:
                owner.speech.attach_utterances(delivery, after)
                owner.speech.track_speech(delivery, handle, after)
            owner._publish()
            if rt.state.ended:
                owner._ended(handle)
        if failed is not None:
            owner.replies.fallback = True
            cause = failed.__cause__ or failed
            owner.model_failed("talker", f"{type(cause).__name__}: {cause}", error=cause,
                               logged=False)
            # Not retryable: this LLM must not rerun the turn; a FallbackAdapter moves on.
            raise APIConnectionError(f"superdialog Talker failed: {cause}",
                                     retryable=False) from cause
        self._event_ch.send_nowait(llm.ChatChunk(id=request_id, usage=tally.as_usage()))

    def _send_call(self, call: llm.FunctionToolCall) -> None:
        """A Talker function call, complete, to LiveKit at once (it runs the tool)."""
        self._owner.speech.ledger.call_ids.add(call.call_id)
        self._event_ch.send_nowait(llm.ChatChunk(
            id=utils.shortuuid("sd_call_"), delta=llm.ChoiceDelta(role="assistant",
                                                                 tool_calls=[call])))


class ProbeStream(llm.LLMStream):
    """A FallbackAdapter's recovery probe: is the Talker answering again? Nothing is logged.

    The Talker gets a one-line request; its first chunk (or its end) means it is back, an
    error keeps this LLM marked unavailable.
    """

    _llm_attempt_span_name = None

    def __init__(self, owner: DialogMachineLLM, **kwargs: Any) -> None:
        super().__init__(owner, **kwargs)
        self._owner = owner
        self._retry_on_chunk_sent = False

    async def _run(self) -> None:
        owner = self._owner
        owner.replies.fallback = True
        talker = owner._talker_llm
        if talker is None:
            return  # a scripted Talker (tests): nothing to probe
        ctx = llm.ChatContext.empty()
        ctx.add_message(role="system", content="Health check: answer with one word.")
        ctx.add_message(role="user", content="Ready?")
        try:
            async with talker.chat(chat_ctx=ctx, conn_options=self._conn_options) as stream:
                async for chunk in stream:
                    if chunk.delta is not None and chunk.delta.content:
                        self._event_ch.send_nowait(llm.ChatChunk(id=chunk.id, delta=chunk.delta))
                        return
        except APIError:
            raise
        except Exception as exc:
            raise APIConnectionError(f"superdialog Talker probe failed: {exc}",
                                     retryable=False) from exc


__all__ = ["DIRECTOR_METRICS_LABEL", "DialogEvent", "DialogMachineLLM", "DialogStream",
           "ProbeStream"]
