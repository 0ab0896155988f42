"""A real HTTP server on 127.0.0.1 with programmable routes, for tests that need a peer.

Tests of tools (and of anything that calls tools) must talk to a real socket, not a mock, but
must never leave the machine. ``LoopbackServer`` runs an aiohttp server on a free loopback port
in a background thread with its own event loop, so it works from sync and async tests alike
and is not tied to pytest-asyncio's per-test loop.

    with LoopbackServer() as server:
        server.route("POST", "/visits", Reply(201, json={"ref": "A1"}))
        server.route("GET", "/slow", Reply(delay=2.0))
        server.route("GET", "/flaky", Reply(500), Reply(500), Reply(200, json={}))  # a sequence
        server.route("GET", "/auth", handler=lambda req: Reply(200 if req.header("authorization") else 401))
        ... server.url("/visits") ...
        assert server.requests[0].json == {...}

A route's replies are used in order, one per request, and the last one repeats. A request to a
path with no route gets a 404 and is still recorded. ``closed_port()`` gives a port on which
nothing listens (for "connection refused").
"""

from __future__ import annotations

import asyncio
import json as jsonlib
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

_UNSET: Any = object()
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class Reply:
    """One programmed response.

    ``json`` (any JSON value, including None via ``json=None``), ``text`` or ``body`` give the
    payload; ``size`` instead streams that many filler bytes (``chunked=True`` omits the
    Content-Length header so a client has to count); ``delay`` waits before answering.
    """

    status: int = 200
    json: Any = _UNSET
    text: str | None = None
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    size: int | None = None
    chunked: bool = False
    content_type: str | None = None


@dataclass(frozen=True)
class RecordedRequest:
    """What the server received: method, path, query, headers (original case), raw body."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def header(self, name: str) -> str | None:
        """Case-insensitive header lookup (None when absent)."""
        lowered = name.lower()
        for key, value in self.headers.items():
            if key.lower() == lowered:
                return value
        return None

    @property
    def json(self) -> Any:
        """The body parsed as JSON; None for an empty body; ValueError if it is not JSON."""
        if not self.body:
            return None
        return jsonlib.loads(self.body)


Handler = Callable[[RecordedRequest], Reply]


class _Route:
    def __init__(self, replies: tuple[Reply, ...], handler: Handler | None) -> None:
        if not replies and handler is None:
            raise ValueError("a route needs at least one Reply or a handler")
        self._replies = list(replies)
        self._handler = handler
        self._served = 0

    def next_reply(self, request: RecordedRequest) -> Reply:
        if self._handler is not None:
            return self._handler(request)
        reply = self._replies[min(self._served, len(self._replies) - 1)]
        self._served += 1
        return reply


def closed_port() -> int:
    """A loopback port with nothing listening on it (bound once, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LoopbackServer:
    """An aiohttp server on 127.0.0.1:<free port>, running in its own thread.

    Use it as a context manager (sync or async) or call ``start()``/``stop()``. Routes may be
    added or replaced at any time; ``requests`` lists every request received, in order.
    With ``ssl_context`` (a server-side ``ssl.SSLContext`` holding a test certificate) it
    serves HTTPS.
    """

    def __init__(self, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl_context = ssl_context  # serve HTTPS with this server-side context
        self._routes: dict[tuple[str, str], _Route] = {}
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.port: int = 0

    # --- programming -----------------------------------------------------------------------

    def route(self, method: str, path: str, *replies: Reply, handler: Handler | None = None) -> None:
        """Answer ``METHOD path`` with ``replies`` in order (the last repeats), or ``handler``."""
        with self._lock:
            self._routes[(method.upper(), path)] = _Route(replies, handler)

    def url(self, path: str = "") -> str:
        """The absolute URL of ``path`` on this server."""
        if not self.port:
            raise RuntimeError("LoopbackServer is not started; use it as a context manager")
        scheme = "https" if self._ssl_context is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    @property
    def base_url(self) -> str:
        return self.url("")

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far."""
        with self._lock:
            return list(self._requests)

    def requests_to(self, path: str, method: str | None = None) -> list[RecordedRequest]:
        """The requests received for ``path`` (optionally only ``method``)."""
        return [
            r for r in self.requests
            if r.path == path and (method is None or r.method == method.upper())
        ]

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> LoopbackServer:
        """Start the server thread and wait until the socket listens."""
        if self._thread is not None:
            return self
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._serve())
            except BaseException as exc:  # reported to start() below
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._shutdown())
            loop.close()

        self._thread = threading.Thread(target=run, name="loopback-http", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("LoopbackServer did not start within 10 s")
        if failure:
            raise RuntimeError(f"LoopbackServer failed to start: {failure[0]!r}") from failure[0]
        return self

    def stop(self) -> None:
        """Stop the server (pending delayed replies are cancelled) and join the thread."""
        if self._thread is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._thread = None
        self._loop = None
        self.port = 0

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> LoopbackServer:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    # --- server side (runs on the server thread) ---------------------------------------------

    async def _serve(self) -> None:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self._ssl_context)
        await site.start()
        server = site._server  # aiohttp exposes the bound port only through the server
        assert server is not None and server.sockets  # type: ignore[union-attr]
        self.port = int(server.sockets[0].getsockname()[1])  # type: ignore[union-attr]

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        recorded = RecordedRequest(
            method=request.method,
            path=request.path,
            query=dict(request.query),
            headers=dict(request.headers),
            body=await request.read(),
        )
        with self._lock:
            self._requests.append(recorded)
            route = self._routes.get((request.method, request.path))
        if route is None:
            return web.json_response(
                {"error": f"no route for {request.method} {request.path}"}, status=404
            )
        reply = route.next_reply(recorded)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.size is not None:
            return await self._stream_filler(request, reply)
        body, content_type = _payload(reply)
        return web.Response(
            status=reply.status, body=body, headers=reply.headers, content_type=content_type
        )

    async def _stream_filler(self, request: web.Request, reply: Reply) -> web.StreamResponse:
        assert reply.size is not None
        response = web.StreamResponse(status=reply.status, headers=reply.headers)
        response.content_type = reply.content_type or "application/octet-stream"
        if reply.chunked:
            response.enable_chunked_encoding()
        else:
            response.content_length = reply.size
        await response.prepare(request)
        remaining = reply.size
        try:
            while remaining > 0:
                n = min(_CHUNK, remaining)
                await response.write(b"x" * n)
                remaining -= n
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass  # the client hung up early on purpose (a size cap); nothing to report
        return response


def _payload(reply: Reply) -> tuple[bytes, str]:
    if reply.body is not None:
        return reply.body, reply.content_type or "application/octet-stream"
    if reply.text is not None:
        return reply.text.encode(), reply.content_type or "text/plain"
    if reply.json is not _UNSET:
        return jsonlib.dumps(reply.json).encode(), reply.content_type or "application/json"
    return b"", reply.content_type or "application/octet-stream"


def iter_json_bodies(requests: list[RecordedRequest]) -> Iterator[Any]:
    """The JSON bodies of ``requests`` in order (handy in assertions)."""
    for request in requests:
        yield request.json


__all__ = ["LoopbackServer", "RecordedRequest", "Reply", "closed_port", "iter_json_bodies"]
