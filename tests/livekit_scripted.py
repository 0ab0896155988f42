"""Scripted LiveKit LLMs for plugin tests: real ``livekit.agents.llm.LLM`` subclasses.

``TalkerLLM`` streams each scripted reply word by word (optionally slowly, for barge-in tests);
``DirectorLLM`` answers each call with a complete ``record_verdict`` tool call (or, for a
``str`` verdict, plain text). Both record the chat contexts and tools they were called with.
Exhausted scripts behave like the engine's scripted models: the last reply repeats, verdicts
become ``{}``. A verdict may be a callable taking the request's chat context.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from livekit.agents import APIConnectionError, APIConnectOptions, llm, utils
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS


class _Stream(llm.LLMStream):
    def __init__(self, owner: Any, pieces: list[str], calls: list[llm.FunctionToolCall],
                 delay: float, fail_after: int | None = None, **kwargs: Any) -> None:
        super().__init__(owner, **kwargs)
        self._fail_after = fail_after
        self._pieces = pieces
        self._calls = calls
        self._delay = delay
        self._owner = owner

    async def _run(self) -> None:
        rid = utils.shortuuid("scripted_")
        sent = 0
        try:
            for piece in self._pieces:
                if self._fail_after is not None and sent == self._fail_after:
                    raise APIConnectionError("scripted connection drop")
                if self._delay:
                    await asyncio.sleep(self._delay)
                self._event_ch.send_nowait(llm.ChatChunk(
                    id=rid, delta=llm.ChoiceDelta(role="assistant", content=piece)))
                sent += 1
            if self._calls:
                if self._delay:
                    await asyncio.sleep(self._delay)  # a slow Director: the verdict comes late
                self._event_ch.send_nowait(llm.ChatChunk(
                    id=rid, delta=llm.ChoiceDelta(role="assistant", tool_calls=self._calls)))
            self._event_ch.send_nowait(llm.ChatChunk(id=rid, usage=llm.CompletionUsage(
                completion_tokens=max(sent, 1), prompt_tokens=10, total_tokens=10 + max(sent, 1))))
        except asyncio.CancelledError:
            self._owner.cancelled += 1
            raise


class TalkerLLM(llm.LLM):
    """Streams scripted replies word by word; ``delay`` seconds before each word.

    ``fail_after=n`` makes the next stream drop its connection after ``n`` words (once).
    """

    def __init__(self, replies: list[str], *, delay: float = 0.0,
                 fail_after: int | None = None) -> None:
        super().__init__()
        self.replies = list(replies)
        self.delay = delay
        self.fail_after = fail_after  # raise APIConnectionError after that many words (once)
        self.contexts: list[llm.ChatContext] = []
        self.cancelled = 0
        self._last = "Okay."

    @property
    def model(self) -> str:
        return "scripted-talker"

    def chat(self, *, chat_ctx: llm.ChatContext, tools: list[llm.Tool] | None = None,
             conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS, **_: Any) -> _Stream:
        self.contexts.append(chat_ctx.copy())
        if self.replies:
            self._last = self.replies.pop(0)
        words = self._last.split(" ")
        pieces = [w if i == 0 else " " + w for i, w in enumerate(words)]
        fail_after, self.fail_after = self.fail_after, None
        return _Stream(self, pieces, [], self.delay, fail_after, chat_ctx=chat_ctx,
                       tools=tools or [], conn_options=conn_options)


class DirectorLLM(llm.LLM):
    """Answers every call with the next scripted verdict as a forced tool call."""

    def __init__(self, verdicts: list[Any], *, delay: float = 0.0) -> None:
        super().__init__()
        self.verdicts = list(verdicts)
        self.delay = delay
        self.contexts: list[llm.ChatContext] = []
        self.tool_choices: list[Any] = []
        self.tools: list[list[llm.Tool]] = []
        self.cancelled = 0

    @property
    def model(self) -> str:
        return "scripted-director"

    def chat(self, *, chat_ctx: llm.ChatContext, tools: list[llm.Tool] | None = None,
             conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
             tool_choice: Any = None, **_: Any) -> _Stream:
        self.contexts.append(chat_ctx.copy())
        self.tool_choices.append(tool_choice)
        self.tools.append(list(tools or []))
        verdict = self.verdicts.pop(0) if self.verdicts else {}
        if callable(verdict):
            verdict = verdict(chat_ctx)
        if isinstance(verdict, str):
            pieces, calls = [verdict], []
        else:
            name = tool_choice["function"]["name"] if isinstance(tool_choice, dict) else "record_verdict"
            pieces = []
            calls = [llm.FunctionToolCall(name=name, arguments=json.dumps(verdict),
                                          call_id=utils.shortuuid("call_"))]
        return _Stream(self, pieces, calls, self.delay, chat_ctx=chat_ctx, tools=tools or [],
                       conn_options=conn_options)


__all__ = ["DirectorLLM", "TalkerLLM"]
