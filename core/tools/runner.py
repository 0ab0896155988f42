"""Tools and pipelines: HTTP and python tools, middleware refresh-and-replay, typed branches.

``ToolRunner`` belongs to one conversation (it holds the resolved env, which ``env_updates``
change). Every outcome is data: a tool that times out, answers 5xx, refuses the connection,
sends too much or cannot be sent at all yields a failed ``ToolResult`` event, never an
exception. Events go out through the runtime's ``emit`` (which appends and applies them at
once), so a later step's templates already see an earlier step's results.

A call that is *refused* (SSRF guard, a provisional value at a hard gate, a template missing a
value, bad arguments) is never sent, emits no ``ToolCall`` (so ``run_once`` and ``calls``
count only real attempts) and has an error starting with ``"refused: "``; pipelines never
retry it.

Python tools are registered by id in ``python_tools``; how each is called (``fn(args, state)``,
``fn(args)`` or ``fn(**args)``, LiveKit ``@function_tool`` functions included) is decided once,
at construction (see ``pytools.py``). The return value is the result's ``data``; an exception
is a failed result ``"<ExcType>: <message>"``. A python tool receives the live state, so the
hard-gate check (which reads the slots an HTTP tool's templates send) does not apply to it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from ..lang.expr import compile_expr
from ..lang.templates import (
    TemplateRefusal,
    compile_tool_body,
    compile_tool_text,
    compile_tool_url,
)
from ..log import events as ev
from ..log.slots import plan_write
from ..values.clean import ValueTooLarge, clean_value, replaced_detail
from . import http as wire
from .http import shared_http_client
from .outcomes import REFUSED, Emit, PipelineOutcome, is_refused
from .pipelines import run_pipeline
from .pytools import bind_python_tool
from .ssrf import HostUnresolved, Resolver, UrlRefused, vet_url

if TYPE_CHECKING:
    from ..format.playbook import Playbook, ToolSpec
    from ..log.state import ConversationState

@dataclass(frozen=True)
class _Compiled:
    when: Any
    url: Any
    headers: dict[str, Any]
    body: Any
    slot_refs: frozenset[str]


def _dig(data: Any, path: str) -> tuple[bool, Any]:
    """Follow a dotted path of dict keys and list indices; (found, value)."""
    current = data
    for part in path.split("."):
        if isinstance(current, Mapping) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.lstrip("-").isdigit() and -len(current) <= int(part) < len(current):
            current = current[int(part)]
        else:
            return False, None
    return True, current


class _Finish(Protocol):
    def __call__(self, ok: bool, status: int | None = None, data: Any = None,
                 error: str | None = None) -> ev.ToolResult: ...


def _clamp_timeout(seconds: float) -> float:
    """Per-tool timeouts are clamped to 0.1..300 s (a typo cannot hang or disable a call)."""
    return min(max(float(seconds), 0.1), 300.0)


def _cast_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is a boolean")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{value!r} has a fraction")
    return int(str(value).strip()) if isinstance(value, str) else int(value)


def _cast_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is a boolean")
    return float(value)


def _cast_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "1"):
        return True
    if text in ("false", "no", "0"):
        return False
    raise ValueError(f"{value!r} is not a boolean")


_CASTS: dict[str, Callable[[Any], Any]] = {
    "int": _cast_int, "float": _cast_float, "bool": _cast_bool, "str": str,
}


class ToolRunner:
    """Runs one conversation's tools and pipelines (see the module docstring)."""

    def __init__(
        self,
        playbook: Playbook,
        *,
        env: dict[str, str],
        http_client: httpx.AsyncClient | None = None,
        python_tools: Mapping[str, Callable[..., Any]] | None = None,
        resolver: Resolver | None = None,
        retry_backoff: float = 0.2,
        max_response_bytes: int = wire.MAX_RESPONSE_BYTES,
    ) -> None:
        self.playbook = playbook
        self.env = env
        self._client = http_client
        self._resolver = resolver
        self._backoff = retry_backoff
        self._max_bytes = max_response_bytes
        self._python = {tid: bind_python_tool(tid, fn) for tid, fn in (python_tools or {}).items()}
        self._compiled = {spec.id: self._compile(spec) for spec in playbook.tools}

    # --- compilation (once, at construction) --------------------------------------------------

    @staticmethod
    def _compile(spec: ToolSpec) -> _Compiled:
        """Use the loader's compiled templates; compile (and cache on the spec) what it left unset,
        e.g. for a playbook built with ``Playbook.model_validate``."""
        if spec.when and spec._when is None:
            spec._when = compile_expr(spec.when)
        if spec.type == "http":
            if spec.url and spec._url is None:
                spec._url = compile_tool_url(spec.url)
            if spec.headers and not spec._headers:
                spec._headers = {k: compile_tool_text(v) for k, v in spec.headers.items()}
            if spec.body is not None and spec._body is None:
                spec._body = compile_tool_body(spec.body)
        headers = dict(spec._headers or {})
        refs: set[str] = set()
        for template in (spec._url, spec._body, *headers.values()):
            refs.update(getattr(template, "slot_refs", ()) or ())
        return _Compiled(spec._when, spec._url, headers, spec._body, frozenset(refs))

    # --- one tool ------------------------------------------------------------------------------

    async def run_tool(
        self,
        tool_id: str,
        *,
        state: ConversationState,
        emit: Emit,
        args: Mapping[str, Any] | None = None,
        hard_gate: bool = False,
        pipeline: str | None = None,
        attempt: int = 1,
    ) -> ev.ToolResult | None:
        """Run a tool once (plus the middleware's refresh-and-replay); None when skipped by
        ``run_once`` or ``when``."""
        result = await self._run(tool_id, state, emit, args, hard_gate, pipeline, attempt, replay=False)
        middleware = self.playbook.middleware
        if (
            result is None
            or middleware is None
            or result.status != middleware.on_status
            or tool_id == middleware.refresh_with
        ):
            return result
        refreshed = await self._run(middleware.refresh_with, state, emit, None, hard_gate,
                                    pipeline, 1, replay=True)
        if refreshed is None or not refreshed.ok:
            return result  # replaying with the same credentials would fail the same way
        return await self._run(tool_id, state, emit, args, hard_gate, pipeline, attempt, replay=True)

    async def _run(
        self,
        tool_id: str,
        state: ConversationState,
        emit: Emit,
        args: Mapping[str, Any] | None,
        hard_gate: bool,
        pipeline: str | None,
        attempt: int,
        *,
        replay: bool,
    ) -> ev.ToolResult | None:
        try:
            spec = self.playbook.tool(tool_id)
        except KeyError:
            raise ValueError(f"unknown tool '{tool_id}'; declare it under tools:") from None
        compiled = self._compiled[tool_id]
        try:
            call_args, bad_args = self._cast_args(spec, args), None
        except ValueError as exc:
            call_args, bad_args = dict(args or {}), str(exc)
        scope = {**state.scope(env=self.env), "args": call_args}
        if not replay:
            if spec.run_once and state.calls.get(tool_id, 0) > 0:
                return None
            if compiled.when is not None and not compiled.when.evaluate(
                scope, on_error=lambda detail: emit(ev.Degraded(
                    component="tools", detail=f"when:{tool_id}:{detail}"))):
                return None
        started = time.perf_counter()

        def finish(ok: bool, status: int | None = None, data: Any = None, error: str | None = None) -> ev.ToolResult:
            return self._finish(spec, state, emit, ok, status, data, error, started, attempt, pipeline)

        if bad_args is not None:
            return finish(False, error=f"{REFUSED}bad args: {bad_args}")
        if spec.type == "python":
            return await self._run_python(spec, state, emit, call_args, attempt, pipeline, finish)
        return await self._run_http(spec, compiled, state, emit, scope, hard_gate, attempt, pipeline, finish)

    @staticmethod
    def _cast_args(spec: ToolSpec, args: Mapping[str, Any] | None) -> dict[str, Any]:
        out = dict(args or {})
        for name, arg_spec in spec.args.items():
            if name not in out or out[name] is None:
                if arg_spec.required:
                    raise ValueError(f"missing required argument '{name}'")
                continue
            cast = _CASTS.get(arg_spec.type)  # other types pass through as sent
            if cast is not None:
                try:
                    out[name] = cast(out[name])
                except (TypeError, ValueError):
                    raise ValueError(f"argument '{name}'={out[name]!r} is not a {arg_spec.type}") from None
        return out

    async def _run_python(
        self, spec: ToolSpec, state: ConversationState, emit: Emit, args: dict[str, Any],
        attempt: int, pipeline: str | None, finish: _Finish,
    ) -> ev.ToolResult:
        bound = self._python.get(spec.id)
        if bound is None:
            return finish(False, error=f"{REFUSED}python tool not registered: {spec.id}; pass it in python_tools")
        emit(ev.ToolCall(tool=spec.id, args=wire.redact_body(args, self.env), attempt=attempt, pipeline=pipeline))
        timeout = _clamp_timeout(spec.timeout)
        try:
            data = await bound.call(args, state, timeout)
        except asyncio.TimeoutError:
            return finish(False, error=f"timeout after {timeout:g} s")
        except Exception as exc:  # a tool's failure is data for the pipeline, not a crash
            return finish(False, error=f"{type(exc).__name__}: {exc}")
        return finish(True, data=data)

    async def _run_http(
        self, spec: ToolSpec, compiled: _Compiled, state: ConversationState, emit: Emit,
        scope: Mapping[str, Any], hard_gate: bool, attempt: int, pipeline: str | None,
        finish: _Finish,
    ) -> ev.ToolResult:
        method = spec.method.upper()
        if hard_gate:
            provisional = sorted(k for k in compiled.slot_refs
                                 if (slot := state.slots.get(k)) is not None and slot.status == "provisional")
            if provisional:
                names = ", ".join(provisional)
                return finish(False, error=(
                    f"{REFUSED}{names} not confirmed yet; read the value back to the caller and "
                    f"get a yes before '{spec.id}' sends it"))
        if compiled.url is None:
            return finish(False, error=f"{REFUSED}tool '{spec.id}' has no url; set tools[].url")
        timeout = _clamp_timeout(spec.timeout)
        try:
            url = compiled.url.render(scope)
            headers = {name: t.render(scope) for name, t in compiled.headers.items()}
            body = compiled.body.render(scope) if compiled.body is not None else None
        except TemplateRefusal as exc:
            return finish(False, error=f"{REFUSED}{exc}")
        try:
            # The tool's timeout bounds the DNS lookup too (getaddrinfo has none of its own).
            target = await asyncio.wait_for(
                vet_url(url, self.playbook.policies.allow_hosts, resolver=self._resolver), timeout)
        except UrlRefused as exc:
            return finish(False, error=f"{REFUSED}blocked tool URL: {exc.reason}")
        except (HostUnresolved, asyncio.TimeoutError) as exc:
            emit(ev.ToolCall(tool=spec.id, args=self._logged_args(method, url, body), attempt=attempt, pipeline=pipeline))
            reason = str(exc) if isinstance(exc, HostUnresolved) else f"timeout after {timeout:g} s resolving the host"
            return finish(False, error=reason)
        try:
            payload = wire.encode_json(body) if body is not None else None
        except (TypeError, ValueError) as exc:
            return finish(False, error=f"{REFUSED}the body is not JSON data ({exc})")
        if wire.needs_idempotency_key(method, headers):
            headers["Idempotency-Key"] = wire.idempotency_key(
                spec.id, method, url, body, session_id=state.session_id,
                entered_version=state.checkpoint_entered_version)
        emit(ev.ToolCall(tool=spec.id, args=self._logged_args(method, url, body), attempt=attempt, pipeline=pipeline))
        client = self._client or shared_http_client()
        try:
            reply = await asyncio.wait_for(wire.send(
                client, method, target, headers=headers,
                body=payload,
                timeout=timeout, max_bytes=self._max_bytes,
            ), timeout)
        except (asyncio.TimeoutError, httpx.TimeoutException):
            return finish(False, error=f"timeout after {timeout:g} s")
        except wire.ResponseTooLarge:
            return finish(False, error=f"response larger than {self._cap_text()}")
        except httpx.ConnectError as exc:
            return finish(False, error=f"connection failed: {exc or type(exc).__name__}")
        except httpx.HTTPError as exc:
            return finish(False, error=f"{type(exc).__name__}: {exc}")
        ok = 200 <= reply.status < 300
        return finish(ok, reply.status, reply.data, None if ok else f"HTTP {reply.status}")

    def _cap_text(self) -> str:
        size = self._max_bytes
        return f"{size // (1 << 20)} MiB" if size % (1 << 20) == 0 else f"{size} bytes"

    def _logged_args(self, method: str, url: str, body: Any) -> dict[str, Any]:
        logged: dict[str, Any] = {"method": method, "url": wire.redact_url(url, self.env)}
        if body is not None:
            logged["body"] = wire.redact_body(body, self.env)
        return logged

    def _finish(
        self, spec: ToolSpec, state: ConversationState, emit: Emit, ok: bool, status: int | None,
        data: Any, error: str | None, started: float, attempt: int, pipeline: str | None,
    ) -> ev.ToolResult:
        """Emit the result (data redacted for the log), then apply env and slot updates."""
        if data is not None:
            # Tool data enters the log: valid text, bounded nesting and numbers (strings are
            # bounded by max_response_bytes already).
            try:
                data, replaced = clean_value(data, f"results.{spec.id}",
                                             max_string_bytes=self._max_bytes)
            except ValueTooLarge as exc:
                ok, data, error = False, None, f"{REFUSED}the response cannot be stored: {exc.message}"
            else:
                if replaced:
                    emit(ev.Degraded(component="tools", detail=replaced_detail(f"tool:{spec.id}", replaced)))
        hidden = frozenset(spec.env_updates.values())
        logged = wire.redact_body(data, self.env, hidden) if data is not None else None
        result = ev.ToolResult(
            tool=spec.id, ok=ok, status=status, data=logged,
            error=wire.redact_text(error, self.env) if error else None,
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
            store_as=spec.store_response_as, attempt=attempt, pipeline=pipeline,
        )
        emit(result)  # stamped in place by the log
        if ok:
            self._apply_updates(spec, state, emit, data)
        return result

    def _apply_updates(self, spec: ToolSpec, state: ConversationState, emit: Emit, data: Any) -> None:
        for key, path in spec.env_updates.items():
            found, value = _dig(data, path)
            if not found or value is None:
                emit(ev.Degraded(component="tools", detail=f"env_update_missing:{spec.id}:{key}<-{path}"))
                continue
            self.env[key] = value if isinstance(value, str) else str(value)
            emit(ev.EnvWrite(key=key, by=f"tool:{spec.id}"))
        for key, path in spec.slot_updates.items():
            found, value = _dig(data, path)
            if not found:
                emit(ev.Degraded(component="tools", detail=f"slot_update_missing:{spec.id}:{key}<-{path}"))
                continue
            for event in plan_write(state, self.playbook, key, value, "tool"):
                emit(event)

    # --- pipelines (run in pipelines.py) -------------------------------------------------------

    async def run_pipeline(
        self,
        pipeline_id: str,
        *,
        state: ConversationState,
        emit: Emit,
        hard_gate: bool,
        args: Mapping[str, Any] | None = None,
    ) -> PipelineOutcome:
        """Run the steps in order, following their branches; always ends with the pipeline's
        marker result ``ToolResult(tool=<id>, pipeline=<id>, store_as="pipeline")``.

        Branch keys: ``ok``; ``http_<status>``, else ``failed``, for a failure. A ``RetrySpec``
        retries failures only (``retry: N`` = N attempts after the first, with a backoff of
        ``retry_backoff`` x attempt, capped at 2 s); under ``ok`` it just continues. Refused
        calls are never retried. ``args`` reach every tool of the pipeline.
        """
        return await run_pipeline(self, pipeline_id, state=state, emit=emit, hard_gate=hard_gate,
                                  args=args, retry_backoff=self._backoff)


__all__ = [
    "REFUSED",
    "PipelineOutcome",
    "ToolRunner",
    "bind_python_tool",
    "is_refused",
    "shared_http_client",
]
