"""A small OpenAI-compatible chat-completions server on 127.0.0.1, scripted per test.

``POST /v1/chat/completions`` (always answered as an SSE stream, like the openai plugin asks):

* a request that forces a tool (``tool_choice`` naming it) or offers ``record_verdict`` is a
  Director call: the next scripted verdict is streamed as
  one tool call named after the request's ``tool_choice`` function (id and name in the first
  delta, the JSON arguments split over later deltas, ``finish_reason: tool_calls``). A verdict
  given as a ``str`` is streamed as plain text content instead (the "JSON text answer" path);
* any other request is a Talker call (it may offer the Agent's function tools): the next
  scripted reply is streamed word by word, or, for a ``CallTool``, as a tool call.

Exhausted scripts behave like ``ScriptedDirector``/``ScriptedTalker``: ``{}`` for verdicts, the
last reply repeats. Every request body is kept in ``.requests`` (and split into
``.director_requests`` / ``.talker_requests``) so tests can assert what the models were shown.
A verdict or reply may be a callable taking the request body.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

Script = Any  # dict | str | RawToolArguments | Callable[[dict], ...]


class RawToolArguments(str):
    """A verdict streamed as a tool call whose arguments are exactly this text (maybe not JSON)."""


class CallTool:
    """A Talker reply that calls one of the offered function tools (after optional ``text``).

    Streamed like OpenAI does: id and name first, the JSON arguments over later deltas, then
    ``finish_reason: tool_calls``.
    """

    def __init__(self, name: str, arguments: dict[str, Any] | None = None, *, text: str = "",
                 call_id: str = "call_talker_1") -> None:
        self.name = name
        self.arguments = json.dumps(arguments or {})
        self.text = text
        self.call_id = call_id


def is_director_request(body: dict[str, Any]) -> bool:
    """A Director call forces its verdict tool; a Talker may be offered the Agent's tools."""
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        return True
    return any(t.get("function", {}).get("name") == "record_verdict" for t in body.get("tools", []))


class FakeOpenAIServer:
    """Start with ``async with FakeOpenAIServer(...) as server``; ``server.base_url`` ends in /v1."""

    def __init__(
        self,
        *,
        talker: list[Script] | None = None,
        director: list[Script] | None = None,
        token_delay: float = 0.0,
        director_delay: float = 0.0,
        fail_talker: int = 0,
    ) -> None:
        self.talker: list[Script] = list(talker or [])
        self.director: list[Script] = list(director or [])
        self.token_delay = token_delay
        self.director_delay = director_delay
        self.fail_talker = fail_talker  # answer that many Talker requests with HTTP 500 first
        self.requests: list[dict[str, Any]] = []
        self.director_requests: list[dict[str, Any]] = []
        self.talker_requests: list[dict[str, Any]] = []
        self.disconnects = 0  # streams the client closed early (barge-in)
        self._last_reply = "Okay."
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def __aenter__(self) -> FakeOpenAIServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None and server.sockets
        self.port = server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake", "object": "model"}]})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        if self.fail_talker and not is_director_request(body):
            self.fail_talker -= 1
            self.talker_requests.append(body)
            return web.json_response({"error": {"message": "scripted outage"}}, status=500)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        model = body.get("model", "fake")
        try:
            if is_director_request(body):
                self.director_requests.append(body)
                await self._stream_director(response, body, model)
            else:
                self.talker_requests.append(body)
                await self._stream_talker(response, body, model)
            await response.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            self.disconnects += 1
            raise
        return response

    @staticmethod
    def _pick(script: Script, body: dict[str, Any]) -> Any:
        return script(body) if callable(script) else script

    async def _send(self, response: web.StreamResponse, model: str, delta: dict[str, Any] | None,
                    finish: str | None = None, usage: dict[str, int] | None = None) -> None:
        chunk: dict[str, Any] = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        if usage is not None:
            chunk["usage"] = usage
        await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")

    async def _stream_talker(self, response: web.StreamResponse, body: dict[str, Any], model: str) -> None:
        if self.talker:
            reply = self._pick(self.talker.pop(0), body)
            self._last_reply = reply
        else:
            reply = self._pick(self._last_reply, body)
        if isinstance(reply, CallTool):
            await self._stream_tool_call(response, model, reply)
            return
        words = str(reply).split(" ")
        await self._send(response, model, {"role": "assistant", "content": ""})
        for i, word in enumerate(words):
            if self.token_delay:
                await asyncio.sleep(self.token_delay)
            await self._send(response, model, {"content": word if i == 0 else " " + word})
        await self._send(response, model, {}, finish="stop")
        await self._send(response, model, None,
                         usage={"prompt_tokens": 20, "completion_tokens": len(words),
                                "total_tokens": 20 + len(words)})

    async def _stream_tool_call(self, response: web.StreamResponse, model: str,
                                call: CallTool) -> None:
        await self._send(response, model, {"role": "assistant", "content": call.text or None})
        await self._send(response, model, {"tool_calls": [
            {"index": 0, "id": call.call_id, "type": "function",
             "function": {"name": call.name, "arguments": ""}}]})
        step = max(1, len(call.arguments) // 2)
        for start in range(0, len(call.arguments), step):
            await self._send(response, model, {"tool_calls": [
                {"index": 0, "function": {"arguments": call.arguments[start:start + step]}}]})
        await self._send(response, model, {}, finish="tool_calls")
        await self._send(response, model, None,
                         usage={"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25})

    async def _stream_director(self, response: web.StreamResponse, body: dict[str, Any], model: str) -> None:
        verdict = self._pick(self.director.pop(0), body) if self.director else {}
        if self.director_delay:
            await asyncio.sleep(self.director_delay)
        if isinstance(verdict, str) and not isinstance(verdict, RawToolArguments):  # a plain (possibly fenced) JSON text answer
            await self._send(response, model, {"role": "assistant", "content": verdict})
            await self._send(response, model, {}, finish="stop")
        else:
            choice = body.get("tool_choice")
            name = (
                choice["function"]["name"]
                if isinstance(choice, dict)
                else body["tools"][0]["function"]["name"]
            )
            arguments = verdict if isinstance(verdict, RawToolArguments) else json.dumps(verdict)
            await self._send(response, model, {
                "role": "assistant",
                "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                "function": {"name": name, "arguments": ""}}],
            })
            step = max(1, len(arguments) // 3)
            for start in range(0, len(arguments), step):
                await self._send(response, model, {
                    "tool_calls": [{"index": 0, "function": {"arguments": arguments[start:start + step]}}],
                })
            await self._send(response, model, {}, finish="tool_calls")
        await self._send(response, model, None,
                         usage={"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60})


def tool_names(body: dict[str, Any]) -> list[str]:
    """The function names a request offered."""
    return [t["function"]["name"] for t in body.get("tools", [])]


Responder = Callable[[dict[str, Any]], Any]

__all__ = ["CallTool", "FakeOpenAIServer", "FakeOpenAIServerThread", "RawToolArguments",
           "is_director_request", "tool_names"]


class FakeOpenAIServerThread:
    """A ``FakeOpenAIServer`` on its own event loop in a thread, for a client in another process
    (a worker, a CLI): ``with FakeOpenAIServerThread(talker=[...]) as server: ...``."""

    def __init__(self, **script: Any) -> None:
        self._script = script
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.server: FakeOpenAIServer | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with FakeOpenAIServer(**self._script) as server:
            self.server = server
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        assert self._ready.wait(30), "the fake model server did not start"
        assert self.server is not None
        return self.server

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
