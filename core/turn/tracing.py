"""OpenTelemetry spans for a call (SPEC §11): one per turn, with the Director call, each Talker
segment and each tool call as children.

The engine depends only on ``opentelemetry-api``: a ``Runtime`` takes a tracer (the plugin
passes LiveKit's, so a LiveKit user's exporter receives these spans) or uses the global
provider's. Attributes say where the call is and what happened (checkpoint, advance, outcome,
degraded components, tool ids and HTTP status, attempt counts, timings); never an env value, a
slot value, a tool's arguments or URL, or anything the caller or the models said.

Without a recording tracer (no SDK provider installed) a turn costs one non-recording span and
its children are not made at all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..log.events import Advance, Degraded, SessionEnd, ToolResult

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

    from ..log.eventlog import EventLog
    from ..log.state import ConversationState
    from ..roles.models import DirectorModel, DirectorRequest, TalkerModel, TalkerRequest
    from ..tools.runner import ToolRunner

TRACER_NAME = "superdialog_core"


def default_tracer() -> Tracer:
    """The global provider's tracer (a no-op until an SDK provider is installed)."""
    from opentelemetry import trace

    return trace.get_tracer(TRACER_NAME)


@dataclass(frozen=True)
class TurnSpan:
    """An open turn span and the log version its turn started at."""

    span: Span
    version: int


class CallTracing:
    """The spans of one call: the open turn span and its children (see the module docstring)."""

    def __init__(self, tracer: Tracer | None) -> None:
        self.tracer = tracer if tracer is not None else default_tracer()
        self._span: Span | None = None
        self._context: Any = None  # the open turn span's context, None when not recording

    def begin(self, kind: str, *, session_id: str, checkpoint: str | None,
              version: int) -> TurnSpan | None:
        """Open the span of a turn (``kind``: opening, turn, external); None when not recording."""
        span = self.tracer.start_span(f"superdialog.{kind}", attributes={
            "superdialog.session_id": session_id,
            "superdialog.checkpoint.before": checkpoint or "",
            "superdialog.version.before": version,
        })
        if not span.is_recording():
            self._span = self._context = None
            return None
        from opentelemetry import trace

        self._span = span
        self._context = trace.set_span_in_context(span)
        return TurnSpan(span, version)

    def end(self, turn: TurnSpan, log: EventLog, state: ConversationState) -> None:
        """Close a turn span with what its events did (never their values)."""
        events = log.since(turn.version)
        advances = [e for e in events if isinstance(e, Advance)]
        degraded = [e.component for e in events if isinstance(e, Degraded)]
        span = turn.span
        span.set_attributes({
            "superdialog.checkpoint": state.checkpoint or "",
            "superdialog.advance": [f"{e.from_ or ''}->{e.to}" for e in advances],
            "superdialog.advance.rules": [e.rule_id for e in advances],
            "superdialog.degradations": degraded,
            "superdialog.degraded_count": len(degraded),
            "superdialog.events": len(events),
            "superdialog.version": log.version,
            "superdialog.ended": state.ended,
        })
        if state.outcome is not None:
            span.set_attribute("superdialog.outcome", state.outcome)
        end = next((e for e in events if isinstance(e, SessionEnd)), None)
        if end is not None:
            span.set_attribute("superdialog.end_reason", end.reason or "")
        span.end()
        if self._span is span:
            self._span = self._context = None

    @contextmanager
    def child(self, name: str, attributes: dict[str, Any]) -> Iterator[Span | None]:
        """A child span of the open turn (nothing when no turn span is recording)."""
        if self._context is None:
            yield None
            return
        with self.tracer.start_as_current_span(name, context=self._context,
                                               attributes=attributes) as span:
            yield span

    # --- model and tool wrappers ---------------------------------------------------------

    def director(self, model: DirectorModel) -> DirectorModel:
        return _TracedDirector(model, self)

    def talker(self, model: TalkerModel) -> TalkerModel:
        return _TracedTalker(model, self)


class _TracedDirector:
    """A ``DirectorModel`` whose every call is a ``superdialog.director`` span."""

    def __init__(self, inner: DirectorModel, tracing: CallTracing) -> None:
        self.inner = inner
        self._tracing = tracing

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def decide(self, request: DirectorRequest) -> Any:
        if self._tracing._context is None:
            return await self.inner.decide(request)
        with self._tracing.child("superdialog.director",
                                 {"superdialog.director.tool": request.tool_name}) as span:
            answer = await self.inner.decide(request)
            if span is not None:
                span.set_attribute("superdialog.director.answer_kind",
                                   "text" if isinstance(answer, str) else "object")
            return answer


class _TracedTalker:
    """A ``TalkerModel`` whose every segment is a ``superdialog.talker`` span."""

    def __init__(self, inner: TalkerModel, tracing: CallTracing) -> None:
        self.inner = inner
        self._tracing = tracing

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def speak(self, request: TalkerRequest) -> AsyncIterator[str]:
        if self._tracing._context is None:
            return self.inner.speak(request)
        return self._speak(request)

    async def _speak(self, request: TalkerRequest) -> AsyncIterator[str]:
        with self._tracing.child("superdialog.talker", {
            "superdialog.talker.purpose": request.purpose,
            "superdialog.talker.spoke_from_version": request.spoke_from_version or 0,
        }) as span:
            pieces = chars = 0
            try:
                async with aclosing(self.inner.speak(request)) as stream:
                    async for piece in stream:
                        pieces += 1
                        chars += len(piece)
                        yield piece
            finally:
                if span is not None:
                    span.set_attributes({"superdialog.talker.pieces": pieces,
                                         "superdialog.talker.chars": chars})


def trace_tools(runner: ToolRunner, tracing: CallTracing) -> None:
    """Make each ``runner.run_tool`` call (pipeline steps, on_enter tools) a
    ``superdialog.tool`` span: the runner's own method is wrapped on this one instance."""
    inner = runner.run_tool

    async def run_tool(tool_id: str, **kwargs: Any) -> ToolResult | None:
        if tracing._context is None:
            return await inner(tool_id, **kwargs)
        attributes = {"superdialog.tool": tool_id,
                      "superdialog.tool.attempt": kwargs.get("attempt", 1)}
        if kwargs.get("pipeline"):
            attributes["superdialog.pipeline"] = kwargs["pipeline"]
        with tracing.child("superdialog.tool", attributes) as span:
            result = await inner(tool_id, **kwargs)
            if span is not None:
                span.set_attributes(tool_attributes(result))
            return result

    runner.run_tool = run_tool  # type: ignore[method-assign]


def tool_attributes(result: ToolResult | None) -> dict[str, Any]:
    """A finished tool call's span attributes (never its arguments, URL or data)."""
    if result is None:
        return {"superdialog.tool.skipped": True}
    attributes: dict[str, Any] = {"superdialog.tool.ok": result.ok}
    if result.status is not None:
        attributes["http.response.status_code"] = result.status
    if result.duration_ms is not None:
        attributes["superdialog.tool.duration_ms"] = result.duration_ms
    return attributes
