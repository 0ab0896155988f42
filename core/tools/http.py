"""The wire side of HTTP tools: the shared client, pinned sending, size cap, log redaction.

One ``httpx.AsyncClient`` per process (per event loop, so a test suite that runs one loop per
test never shares pooled connections across loops): pooling and keep-alive for every call,
``trust_env=False`` so proxy variables never reroute tool calls, ``follow_redirects=False`` so
a redirect cannot lead past the SSRF guard.

``send`` connects to the address the SSRF guard vetted, never to a fresh DNS answer: the shared
client's ``PinnedTransport`` connects a host name only to the address vetted for this request
(and refuses any other connection); another client gets the URL rewritten to the address with
the original ``Host`` header and TLS SNI. Bodies are counted while they stream (after
content decoding, so a compressed bomb is caught too) and refused past ``MAX_RESPONSE_BYTES``.

``redact_url`` / ``redact_body`` / ``redact_text`` make the logged copy of a request: userinfo,
secret-looking query parameters and body keys become ``***`` and env values are replaced by
``<env.KEY>``. The real values are sent; only the log copy is redacted.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import itertools
import json
import re
import ssl
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpcore
import httpx

from .ssrf import VettedTarget, parse_ip_literal

MAX_RESPONSE_BYTES = 1 << 20
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
REDACTED = "***"

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
    weakref.WeakKeyDictionary()
)
# The addresses the SSRF guard vetted for the request being sent: (host, port) -> IP.
_pins: contextvars.ContextVar[dict[tuple[str, int], str] | None] = contextvars.ContextVar(
    "superdialog_tool_pins", default=None
)


_LIMITS = httpx.Limits(max_connections=200, max_keepalive_connections=50, keepalive_expiry=30)


class _PinningBackend(httpcore.AsyncNetworkBackend):
    """Connects a host name to the address vetted for it, and to nothing else (fail closed)."""

    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self, host: str, port: int, timeout: float | None = None,
        local_address: str | None = None, socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        pins = _pins.get()
        address = pins.get((host.lower(), port)) if pins else None
        if address is None:
            raise httpcore.ConnectError(
                f"refusing to connect to {host}:{port}: the SSRF guard did not vet it "
                "(send tool requests through superdialog_core.http.send)"
            )
        return await self._inner.connect_tcp(address, port, timeout, local_address, socket_options)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("tool requests never use unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class PinnedTransport(httpx.AsyncHTTPTransport):
    """An httpx transport whose connections go only to addresses the SSRF guard vetted.

    Requests keep their real host name, so the connection pool is keyed by name and TLS is
    verified against the name (a connection verified for one host is never reused for another
    host on the same address).
    """

    def __init__(
        self, *, verify: ssl.SSLContext | bool = True,
        limits: httpx.Limits = _LIMITS,
    ) -> None:
        super().__init__(verify=verify, trust_env=False, limits=limits)
        if not hasattr(self, "_pool"):  # httpx internals moved: fail loudly, never unpinned
            raise RuntimeError("httpx.AsyncHTTPTransport has no _pool; pin httpx to a tested version")
        context = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(
            verify=verify, trust_env=False)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_PinningBackend(),
        )


def pinned_http_client(*, verify: ssl.SSLContext | bool = True) -> httpx.AsyncClient:
    """A new tool client that connects only to vetted addresses (``trust_env=False``, no
    redirects). ``shared_http_client()`` is one of these; build another for custom TLS trust."""
    return httpx.AsyncClient(
        transport=PinnedTransport(verify=verify), trust_env=False, follow_redirects=False,
        timeout=httpx.Timeout(30.0),
    )


def shared_http_client() -> httpx.AsyncClient:
    """The process's tool client (one per running event loop; created on first use)."""
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None or client.is_closed:
        client = pinned_http_client()
        _clients[loop] = client
    return client


async def aclose_shared_http_client() -> None:
    """Close this loop's shared client (on shutdown; the next call makes a new one)."""
    client = _clients.pop(asyncio.get_running_loop(), None)
    if client is not None:
        await client.aclose()


def _is_pinning(client: httpx.AsyncClient) -> bool:
    return isinstance(getattr(client, "_transport", None), PinnedTransport)


def _pin_keys(target: VettedTarget) -> dict[tuple[str, int], str]:
    keys = {target.host}
    # Not an IDN-encodable name: httpx refuses it before connecting anyway.
    with contextlib.suppress(UnicodeError):
        keys.add(target.host.encode("idna").decode("ascii").lower())
    return {(key, target.port): target.address for key in keys}


class ResponseTooLarge(Exception):
    """The response body passed the size cap; it was not read further."""


@dataclass(frozen=True)
class HttpReply:
    """Status and decoded body (JSON value, ``{"text": ...}`` for other text, None when empty)."""

    status: int
    data: Any


async def send(
    client: httpx.AsyncClient,
    method: str,
    target: VettedTarget,
    *,
    headers: Mapping[str, str],
    body: bytes | None,
    timeout: float,
    max_bytes: int = MAX_RESPONSE_BYTES,
) -> HttpReply:
    """Send one request to the vetted address; raises httpx errors or ``ResponseTooLarge``.

    With a pinning client (``shared_http_client``/``pinned_http_client``) the request keeps
    its URL and the transport connects to ``target.address``. Any other client (a test's, or
    one the host application passes) gets the URL rewritten to the address, the original
    ``Host`` header and, for https, the name as TLS SNI; such a client pools connections by
    address, so prefer a pinning client for https in production.
    """
    out_headers = {k: v for k, v in headers.items() if k.lower() != "host"}
    if body is not None and not any(k.lower() == "content-type" for k in out_headers):
        out_headers["Content-Type"] = "application/json"
    extensions: dict[str, Any] = {}
    pinning = _is_pinning(client)
    if pinning:
        url = target.url
    else:
        url = target.pinned_url
        out_headers["Host"] = target.host_header
        if target.scheme == "https" and _is_name(target.host):
            extensions["sni_hostname"] = target.host  # certificate checked against the name
    request = client.build_request(
        method, url, headers=out_headers, content=body, timeout=httpx.Timeout(timeout),
        extensions=extensions,
    )
    token = _pins.set(_pin_keys(target)) if pinning else None
    try:
        # Never follow a redirect, whatever the client says: it would lead past the guard.
        response = await client.send(request, stream=True, follow_redirects=False)
    finally:
        if token is not None:
            _pins.reset(token)
    try:
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_bytes:
            raise ResponseTooLarge(f"Content-Length {declared}")
        buffer = bytearray()
        async for chunk in response.aiter_bytes():
            buffer += chunk
            if len(buffer) > max_bytes:
                raise ResponseTooLarge(f"more than {max_bytes} bytes")
    finally:
        await response.aclose()
    return HttpReply(response.status_code, decode_body(bytes(buffer), response.encoding))


def _is_name(host: str) -> bool:
    try:
        return parse_ip_literal(host) is None
    except ValueError:
        return True


def decode_body(raw: bytes, encoding: str | None) -> Any:
    """JSON when the body parses as JSON, else ``{"text": ...}``; None for an empty body."""
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, an over-long int, nesting past the stack
        return {"text": raw.decode(encoding or "utf-8", errors="replace")}


def encode_json(body: Any) -> bytes:
    """The JSON bytes sent for a tool body (UTF-8, native types kept)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def idempotency_key(
    tool_id: str, method: str, url: str, body: Any, *,
    session_id: str | None = None, entered_version: int | None = None,
) -> str:
    """SHA-256 of canonical JSON ``[session id, checkpoint entry version, tool id, METHOD, url,
    body]``: the retries of one step share a key, so a server that honours Idempotency-Key
    recognises a retried POST; another call (session) or another entry of the checkpoint
    posting the same body gets its own key, so its booking is not dropped as a duplicate."""
    canonical = json.dumps(
        [session_id, entered_version, tool_id, method.upper(), url, body],
        sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def needs_idempotency_key(method: str, headers: Mapping[str, str]) -> bool:
    """Unsafe methods get a key unless the author supplied one (any case)."""
    return method.upper() not in SAFE_METHODS and not any(
        k.lower() == "idempotency-key" for k in headers
    )


# --- redaction -------------------------------------------------------------------------------

_SECRET_WORDS = frozenset({
    "secret", "secrets", "token", "tokens", "password", "passwd", "pwd", "passphrase", "auth",
    "authorization", "credential", "credentials", "bearer", "jwt", "signature", "sig", "otp",
    "pin", "cvv", "cvc", "apikey", "cookie",
})
_SECRET_PAIRS = frozenset({("api", "key"), ("private", "key"), ("access", "key"), ("client", "secret")})
_SECRET_SUBSTRINGS = ("secret", "token", "password", "passwd", "apikey", "credential", "bearer",
                      "jwt", "signature", "privatekey", "accesskey")
_WORD_SPLIT = re.compile(r"[^a-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def is_secret_key(name: str) -> bool:
    """Whether a parameter or body key names a secret (``api_key``, ``X-Auth-Token``,
    ``clientSecret``, ``pin``), by whole words so ``author`` or ``shipping`` stay visible."""
    words = [w for w in _WORD_SPLIT.split(_CAMEL.sub("_", str(name)).lower()) if w]
    if any(w in _SECRET_WORDS for w in words):
        return True
    if any(pair in _SECRET_PAIRS for pair in itertools.pairwise(words)):
        return True
    joined = "".join(words)
    return any(s in joined for s in _SECRET_SUBSTRINGS)


def redact_text(text: str, env: Mapping[str, str]) -> str:
    """Replace every env value (4+ characters, longest first) with ``<env.KEY>``."""
    for key, value in sorted(env.items(), key=lambda kv: -len(kv[1] or "")):
        if value and len(value) >= 4 and value in text:
            text = text.replace(value, f"<env.{key}>")
    return text


def redact_url(url: str, env: Mapping[str, str]) -> str:
    """The URL without userinfo, with secret-looking query values as ``***`` and env values hidden."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_text(url, env)
    netloc = parts.netloc.rpartition("@")[2]
    if "@" in parts.netloc:
        netloc = f"{REDACTED}@{netloc}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, REDACTED if is_secret_key(k) else v) for k, v in pairs], safe="*<>.")
    return redact_text(urlunsplit((parts.scheme, netloc, parts.path, query, "")), env)


def redact_body(body: Any, env: Mapping[str, str], paths: frozenset[str] = frozenset()) -> Any:
    """A copy of a JSON value with secret keys (recursively) and the dotted ``paths`` as ``***``
    and env values hidden in strings."""
    return _redact(body, env, paths, "")


def _redact(value: Any, env: Mapping[str, str], paths: frozenset[str], here: str) -> Any:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            path = f"{here}.{key}" if here else str(key)
            if is_secret_key(str(key)) or path in paths:
                out[str(key)] = REDACTED
            else:
                out[str(key)] = _redact(item, env, paths, path)
        return out
    if isinstance(value, list | tuple):
        return [
            REDACTED if (f"{here}.{i}" if here else str(i)) in paths
            else _redact(item, env, paths, f"{here}.{i}" if here else str(i))
            for i, item in enumerate(value)
        ]
    if isinstance(value, str):
        return redact_text(value, env)
    return value


__all__ = [
    "MAX_RESPONSE_BYTES",
    "REDACTED",
    "HttpReply",
    "PinnedTransport",
    "ResponseTooLarge",
    "aclose_shared_http_client",
    "decode_body",
    "encode_json",
    "idempotency_key",
    "is_secret_key",
    "needs_idempotency_key",
    "pinned_http_client",
    "redact_body",
    "redact_text",
    "redact_url",
    "send",
    "shared_http_client",
]
