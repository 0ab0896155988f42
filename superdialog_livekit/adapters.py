"""Any LiveKit ``llm.LLM`` as the engine's ``DirectorModel`` / ``TalkerModel`` (SPEC §1, §7).

The Director is asked through one forced tool call: the single tool ``record_verdict`` with
``tool_choice`` naming it (llama.cpp's server only returns tool calls when the function is
named). Its arguments are returned as a dict; anything else the model says (a plain JSON text
answer, fenced or not, or a tool call whose arguments do not parse) is returned as text for the
engine's parser, which retries once with the error.

The Talker is one streamed chat completion per segment; only content deltas are yielded.

A model may carry ``ModelHints`` (``model.superdialog_hints``; ``local/...`` URIs set them):
``json_verdicts`` asks the Director for JSON text through ``response_format`` with the
per-checkpoint schema instead of a tool call (llama.cpp's server streams tool calls in a way
LiveKit's openai plugin reads as empty arguments), and the ``max_tokens`` bounds keep a small
model short.
"""

from __future__ import annotations

import contextvars
import json
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from livekit.agents import APIConnectOptions, llm, utils
from superdialog_core import TalkerToolCall

# The engine runs its own retry (once, on invalid output) and its own director_timeout, so the
# Director's transport never retries: "no hidden model calls" (ARCHITECTURE property 5).
DIRECTOR_CONN_OPTIONS = APIConnectOptions(max_retry=0, timeout=10.0)
# Not every plugin refuses to retry after its first chunk (the openai one does), and a retry
# after text went out would speak it twice: the Talker never retries either; a failed segment
# is answered by the engine's recovery line.
TALKER_CONN_OPTIONS = APIConnectOptions(max_retry=0, timeout=10.0)


@dataclass(frozen=True)
class ModelHints:
    """How the adapters should ask one LiveKit LLM (set as ``model.superdialog_hints``).

    ``json_verdicts``: the Director asks for a JSON object through ``response_format`` with the
    verdict schema (made llama.cpp-safe) and parses the text, instead of a forced tool call.
    ``talker_max_tokens`` / ``director_max_tokens``: ``max_tokens`` per completion (None: no
    bound). ``timeout``: the HTTP timeout in seconds (a local server answers one request at a
    time, so a request may wait for the other role's). ``director_temperature`` for JSON
    verdicts; ``max_string_length`` caps every string in the JSON verdict's schema.
    """

    json_verdicts: bool = False
    talker_max_tokens: int | None = None
    director_max_tokens: int | None = None
    timeout: float | None = None
    director_temperature: float | None = 0.0
    max_string_length: int | None = None


def model_hints(model: Any) -> ModelHints | None:
    """The ``ModelHints`` a LiveKit LLM carries, or None."""
    hints = getattr(model, "superdialog_hints", None)
    return hints if isinstance(hints, ModelHints) else None


def _with_timeout(options: APIConnectOptions, hints: ModelHints | None) -> APIConnectOptions:
    if hints is None or hints.timeout is None or hints.timeout <= options.timeout:
        return options
    return APIConnectOptions(max_retry=options.max_retry, retry_interval=options.retry_interval,
                             timeout=hints.timeout)


_VERDICT_DESCRIPTION = (
    "Record your decision about the caller's latest turn: extracted slot values, confirmations, "
    "denials, the advance target or interrupt, and an optional note for the speaker."
)


@dataclass
class UsageTally:
    """Token usage of the Talker segments streamed for one LiveKit reply."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_cached_tokens: int = 0
    segments: int = 0

    def add(self, usage: llm.CompletionUsage) -> None:
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        self.prompt_cached_tokens += usage.prompt_cached_tokens

    def as_usage(self) -> llm.CompletionUsage:
        return llm.CompletionUsage(
            completion_tokens=self.completion_tokens,
            prompt_tokens=self.prompt_tokens,
            total_tokens=self.prompt_tokens + self.completion_tokens,
            prompt_cached_tokens=self.prompt_cached_tokens,
        )


# Set by DialogMachineLLM's stream around one reply; Talker segments add their usage to it.
# A mutable tally in a context variable reaches Talker calls made from tasks the runtime spawns
# (tasks copy the context, and the copy still points at the same tally).
current_usage: contextvars.ContextVar[UsageTally | None] = contextvars.ContextVar(
    "superdialog_talker_usage", default=None
)


@dataclass
class ReplyTools:
    """The LiveKit function tools of one reply, offered to every Talker segment in it.

    Set by ``DialogStream`` around a reply (``current_tools``); ``send`` forwards a complete
    ``FunctionToolCall`` to LiveKit at once, which runs it (and its handoff).
    """

    tools: list[llm.Tool]
    tool_choice: Any
    send: Any  # Callable[[llm.FunctionToolCall], None]
    calls: int = 0


current_tools: contextvars.ContextVar[ReplyTools | None] = contextvars.ContextVar(
    "superdialog_reply_tools", default=None
)


_ROLES = ("system", "developer", "user", "assistant")
# (role, text) -> the ChatMessages of one request with that role and text, in order.
MessageCache = dict[tuple[str, str], list[llm.ChatMessage]]


def chat_context(messages: Sequence[dict[str, Any]],
                 cache: MessageCache | None = None) -> llm.ChatContext:
    """A LiveKit ChatContext from engine messages (``{"role", "content"}``).

    Building a ``ChatMessage`` (a pydantic model) costs ~13 us, and a Talker request repeats the
    previous one's transcript: with ``cache`` (the previous request's messages by role and
    text, updated in place to hold exactly this request's) only new messages are built. LiveKit
    shares message objects between contexts itself (``ChatContext.copy`` is shallow); within one
    context every item is distinct (providers group items by id): the n-th "yes" of a request
    reuses the previous request's n-th "yes".
    """
    ctx = llm.ChatContext.empty()
    items = ctx.items
    fresh: MessageCache = {}
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "tool" or "tool_calls" in message:
            items.extend(_function_items(message))  # this turn's host function calls
            continue
        if role not in _ROLES:
            raise ValueError(f"messages[{i}].role is {role!r}; expected system, developer, user or assistant")
        content = message.get("content")
        text = content if isinstance(content, str) else str(content or "")
        key = (role, text)
        same = fresh.get(key)
        if same is None:
            same = fresh[key] = []
        known = cache.get(key) if cache is not None else None
        if known is not None and len(known) > len(same):
            item = known[len(same)]
        else:
            item = llm.ChatMessage(role=role, content=[text])
        same.append(item)
        items.append(item)
    if cache is not None:
        cache.clear()
        cache.update(fresh)
    return ctx


def _function_items(message: dict[str, Any]) -> list[llm.ChatItem]:
    """The engine's function call / result messages as LiveKit chat items."""
    if message.get("role") == "tool":
        return [llm.FunctionCallOutput(call_id=str(message.get("tool_call_id", "")),
                                       name=str(message.get("name", "")),
                                       output=str(message.get("content", "")),
                                       is_error=bool(message.get("is_error", False)))]
    return [llm.FunctionCall(call_id=str(call["id"]), name=str(call["name"]),
                             arguments=str(call.get("arguments") or "{}"))
            for call in message.get("tool_calls", [])]
async def _check_local_server(model: Any, exc: BaseException | None = None) -> None:
    """Raise ``LocalServerDied`` when ``model`` is served by a local server that has died.

    ``local/...`` URIs attach the server (``model.local_server``); without ``exc`` this is the
    check before a call (no request to a dead port), with it the check after a failed call
    (the connection drops a moment before the exit status is in).
    """
    server = getattr(model, "local_server", None)
    if server is None:
        return
    died = server.died() if exc is None else await server.died_after_error()
    if died is not None:
        raise died from exc


class LiveKitTalker:
    """``TalkerModel`` over a LiveKit LLM: streams the text deltas of one completion."""

    def __init__(self, model: llm.LLM, *, conn_options: APIConnectOptions = TALKER_CONN_OPTIONS) -> None:
        self.llm = model
        self.conn_options = conn_options
        self._messages: MessageCache = {}  # the last request's, reused by the next (see chat_context)

    async def speak(self, request: Any) -> AsyncIterator[str]:
        hints = model_hints(self.llm)
        extra: dict[str, Any] = {}
        if hints is not None and hints.talker_max_tokens:
            extra["max_tokens"] = hints.talker_max_tokens
        options: dict[str, Any] = {"extra_kwargs": extra} if extra else {}
        offered = current_tools.get()
        if offered is not None and offered.tools:
            # The Agent's @function_tools (LiveKit passed them to chat()): the Talker may call
            # them; LiveKit runs the call and asks for the continuation.
            options["tools"] = offered.tools
            if utils.is_given(offered.tool_choice):
                options["tool_choice"] = offered.tool_choice
        await _check_local_server(self.llm)
        stream = self.llm.chat(chat_ctx=chat_context(request.messages, self._messages),
                               conn_options=_with_timeout(self.conn_options, hints), **options)
        tally = current_usage.get()
        try:
            # async with: a cancelled consumer (barge-in) closes the HTTP stream at once.
            async with stream:
                async for chunk in stream:
                    if chunk.usage is not None and tally is not None:
                        tally.add(chunk.usage)
                    delta = chunk.delta
                    if delta is not None:
                        if delta.content:
                            yield delta.content
                        if delta.tool_calls and offered is not None:
                            for call in delta.tool_calls:
                                offered.send(call)  # to LiveKit first: it runs the tool
                                offered.calls += 1
                                yield TalkerToolCall(call_id=call.call_id, name=call.name,
                                                     arguments=call.arguments or "{}")
        except Exception as exc:
            await _check_local_server(self.llm, exc)
            raise
        if tally is not None:
            tally.segments += 1


@dataclass
class DirectorCall:
    """What one Director call took, for metrics (``DialogMachineLLM`` emits it)."""

    latency_ms: float
    usage: llm.CompletionUsage | None
    answered_with: str  # "tool_call" | "text" | "json" (asked for JSON text, ModelHints)
    extra: dict[str, Any] = field(default_factory=dict)
    ttft_s: float = -1.0  # time to the first content or tool-call chunk (-1: none came)
    request_id: str = ""
    started_at: float = 0.0  # wall clock (time.time) when the call began


def _unused_tool(**_: Any) -> None:  # the verdict tool is never executed, only its arguments read
    raise RuntimeError("record_verdict is a schema for the Director, not a tool to run")


class LiveKitDirector:
    """``DirectorModel`` over a LiveKit LLM: a forced ``record_verdict`` tool call (or JSON text)."""

    def __init__(self, model: llm.LLM, *, conn_options: APIConnectOptions = DIRECTOR_CONN_OPTIONS,
                 on_call: Any = None) -> None:
        self.llm = model
        self.conn_options = conn_options
        self.on_call = on_call  # callable(DirectorCall) for metrics, or None
        self.calls: list[DirectorCall] = []
        self._messages: MessageCache = {}  # the last request's, reused by the next (see chat_context)

    async def decide(self, request: Any) -> dict[str, Any] | str:
        await _check_local_server(self.llm)
        try:
            return await self._decide(request)
        except Exception as exc:
            await _check_local_server(self.llm, exc)
            raise

    async def _decide(self, request: Any) -> dict[str, Any] | str:
        tool_name = getattr(request, "tool_name", "record_verdict") or "record_verdict"
        hints = model_hints(self.llm)
        if hints is not None and hints.json_verdicts:
            return await self._decide_json(request, hints)
        tool = llm.function_tool(
            _unused_tool,
            raw_schema={"name": tool_name, "description": _VERDICT_DESCRIPTION, "parameters": request.schema},
        )
        started = time.perf_counter()
        wall = time.time()
        first = -1.0
        request_id = ""
        text: list[str] = []
        calls: list[llm.FunctionToolCall] = []
        usage: llm.CompletionUsage | None = None
        stream = self.llm.chat(
            chat_ctx=chat_context(request.messages, self._messages),
            tools=[tool],
            tool_choice={"type": "function", "function": {"name": tool_name}},
            conn_options=self.conn_options,
        )
        async with stream:
            async for chunk in stream:
                request_id = chunk.id
                if chunk.usage is not None:
                    usage = chunk.usage
                if chunk.delta is None:
                    continue
                if first < 0 and (chunk.delta.content or chunk.delta.tool_calls):
                    first = time.perf_counter() - started
                if chunk.delta.content:
                    text.append(chunk.delta.content)
                calls.extend(chunk.delta.tool_calls)
        result: dict[str, Any] | str = "".join(text)
        answered = "text"
        for call in calls:
            if call.name != tool_name:
                continue
            answered = "tool_call"
            try:
                parsed = json.loads(call.arguments or "{}")
            except json.JSONDecodeError:
                result = call.arguments  # the engine's parser reports and retries once
            else:
                result = parsed if isinstance(parsed, dict) else call.arguments
            break
        self._record(DirectorCall((time.perf_counter() - started) * 1000.0, usage, answered,
                                  ttft_s=first, request_id=request_id, started_at=wall))
        return result

    async def _decide_json(self, request: Any, hints: ModelHints) -> str:
        """The verdict as JSON text, constrained by ``response_format`` (llama.cpp's extension).

        The engine's parser reads the text (SPEC §7 accepts a plain JSON answer); a cut-off
        answer fails there and is retried once with the error.
        """
        from .llama_schema import llama_safe_schema

        extra: dict[str, Any] = {
            "response_format": {"type": "json_object", "schema": llama_safe_schema(
                request.schema, max_length=hints.max_string_length)},
        }
        if hints.director_max_tokens:
            extra["max_tokens"] = hints.director_max_tokens
        if hints.director_temperature is not None:
            extra["temperature"] = hints.director_temperature
        started = time.perf_counter()
        wall = time.time()
        first = -1.0
        request_id = ""
        text: list[str] = []
        usage: llm.CompletionUsage | None = None
        stream = self.llm.chat(chat_ctx=chat_context(request.messages, self._messages),
                               conn_options=_with_timeout(self.conn_options, hints),
                               extra_kwargs=extra)
        async with stream:
            async for chunk in stream:
                request_id = chunk.id
                if chunk.usage is not None:
                    usage = chunk.usage
                if chunk.delta is not None and chunk.delta.content:
                    if first < 0:
                        first = time.perf_counter() - started
                    text.append(chunk.delta.content)
        self._record(DirectorCall((time.perf_counter() - started) * 1000.0, usage, "json",
                                  ttft_s=first, request_id=request_id, started_at=wall))
        return "".join(text)

    def _record(self, record: DirectorCall) -> None:
        self.calls.append(record)
        if len(self.calls) > 64:  # keep the recent calls only: one instance serves a whole call
            del self.calls[:-64]
        if self.on_call is not None:
            self.on_call(record)


__all__ = [
    "DIRECTOR_CONN_OPTIONS",
    "TALKER_CONN_OPTIONS",
    "DirectorCall",
    "LiveKitDirector",
    "LiveKitTalker",
    "ModelHints",
    "UsageTally",
    "chat_context",
    "current_usage",
    "model_hints",
]
