"""``scripted:<file.yaml>`` model URIs as real LiveKit LLMs (SPEC §12).

A scripted model is an ``llm.LLM`` like any other, so ``DialogMachineLLM``, ``chat`` and the
worker run it through the same adapters as a real model: the Talker streams each reply word by
word; the Director answers each call with the next verdict as the forced ``record_verdict``
tool call (a string item is answered as plain text, for the engine's parser). Exhausted
scripts behave like the engine's scripted models: the Talker repeats its last reply, the
Director answers ``{}``. The script file is read and checked once, when the URI is resolved.
"""

from __future__ import annotations

import json
from typing import Any

from livekit.agents import APIConnectOptions, llm, utils
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS
from superdialog_core.roles.scripts import chunk_words, load_scripts, script_path


class _ScriptStream(llm.LLMStream):
    """Sends prepared chunks: text pieces, then tool calls, then a usage chunk."""

    def __init__(self, owner: llm.LLM, pieces: list[str], calls: list[llm.FunctionToolCall],
                 **kwargs: Any) -> None:
        super().__init__(owner, **kwargs)
        self._pieces = pieces
        self._calls = calls

    async def _run(self) -> None:
        rid = utils.shortuuid("scripted_")
        for piece in self._pieces:
            self._event_ch.send_nowait(llm.ChatChunk(
                id=rid, delta=llm.ChoiceDelta(role="assistant", content=piece)))
        if self._calls:
            self._event_ch.send_nowait(llm.ChatChunk(
                id=rid, delta=llm.ChoiceDelta(role="assistant", tool_calls=self._calls)))
        tokens = max(len(self._pieces) + len(self._calls), 1)
        self._event_ch.send_nowait(llm.ChatChunk(id=rid, usage=llm.CompletionUsage(
            completion_tokens=tokens, prompt_tokens=0, total_tokens=tokens)))


class ScriptedLLM(llm.LLM):
    """A script file played through LiveKit's LLM interface; see the module docstring.

    ``role`` (``talker`` or ``director``) is the list it must have. A call that forces a tool
    (``tool_choice`` naming a function: how the Director adapter asks) plays the director list,
    any other call the talker list; so a mapping file with both lists serves a
    ``DialogMachineLLM`` whose director defaults to its talker. A call for a role the file does
    not script fails loudly, naming the file and the fix. ``calls`` counts the requests.
    """

    def __init__(self, uri: str, role: str) -> None:
        super().__init__()
        if role not in ("talker", "director"):
            raise ValueError(f"a scripted LLM plays the talker or the director, not {role!r}")
        self._uri = uri
        self._role = role
        self._scripts = load_scripts(uri, role)  # type: ignore[arg-type]
        self._next = {"talker": 0, "director": 0}
        self.calls = 0

    @property
    def model(self) -> str:
        return f"scripted:{script_path(self._uri)}"

    @property
    def provider(self) -> str:
        return "scripted"

    @property
    def remaining(self) -> int:
        """Items of this instance's own role not used yet."""
        items = self._scripts[self._role]
        return len(items) - min(self._next[self._role], len(items))

    def _take(self, role: str) -> Any:
        items = self._scripts.get(role)
        if items is None:
            raise ValueError(
                f"{self.model} scripts no {role} (it was given as the {self._role}); pass a "
                f"{role} script too (e.g. --{role} scripted:<file.yaml>), or write the file as a "
                f"mapping with {self._role}: and {role}: lists")
        index = self._next[role]
        self._next[role] += 1
        if role == "director":
            return items[index] if index < len(items) else {}
        return items[min(index, len(items) - 1)] if items else ""

    def chat(self, *, chat_ctx: llm.ChatContext, tools: list[Any] | None = None,
             conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
             tool_choice: Any = None, **_: Any) -> llm.LLMStream:
        self.calls += 1
        forced = tool_choice.get("function", {}).get("name") if isinstance(tool_choice, dict) else None
        item = self._take("director" if forced else "talker")
        pieces: list[str] = []
        calls: list[llm.FunctionToolCall] = []
        if isinstance(item, str):
            pieces = chunk_words(item)
        else:
            calls = [llm.FunctionToolCall(name=forced or "record_verdict",
                                          arguments=json.dumps(item, default=str),
                                          call_id=utils.shortuuid("call_"))]
        return _ScriptStream(self, pieces, calls, chat_ctx=chat_ctx, tools=tools or [],
                             conn_options=conn_options)


__all__ = ["ScriptedLLM"]
