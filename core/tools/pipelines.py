"""Pipelines: a playbook's tool steps run in order, following their typed branches.

``ToolRunner.run_pipeline`` (``runner.py``) is the entry point; this module holds what it runs:
each step is one ``ToolRunner.run_tool`` call, its result picks the branch (``ok``,
``http_<status>``, ``failed``), a ``RetrySpec`` retries failures (never refused calls), and the
pipeline always ends with its marker result ``ToolResult(tool=<id>, pipeline=<id>,
store_as="pipeline")``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ..log import events as ev
from .outcomes import Emit, PipelineOutcome, is_refused

if TYPE_CHECKING:
    from ..format.playbook import Playbook, RetrySpec
    from ..log.state import ConversationState


class StepRunner(Protocol):
    """What a pipeline needs of ``runner.ToolRunner``: its playbook and one tool call."""

    playbook: Playbook

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
    ) -> ev.ToolResult | None: ...


async def run_pipeline(
    runner: StepRunner,
    pipeline_id: str,
    *,
    state: ConversationState,
    emit: Emit,
    hard_gate: bool,
    args: Mapping[str, Any] | None,
    retry_backoff: float,
) -> PipelineOutcome:
    """Run the steps in order, following their branches; always ends with the pipeline's
    marker result ``ToolResult(tool=<id>, pipeline=<id>, store_as="pipeline")``.

    Branch keys: ``ok``; ``http_<status>``, else ``failed``, for a failure. A ``RetrySpec``
    retries failures only (``retry: N`` = N attempts after the first, with a backoff of
    ``retry_backoff`` x attempt, capped at 2 s); under ``ok`` it just continues. Refused
    calls are never retried. ``args`` reach every tool of the pipeline.
    """
    try:
        spec = runner.playbook.pipeline(pipeline_id)
    except KeyError:
        raise ValueError(f"unknown pipeline '{pipeline_id}'; declare it under pipelines:") from None
    started = time.perf_counter()
    outcome = PipelineOutcome(ok=True)
    for step in spec.steps:
        verdict = await _run_step(runner, pipeline_id, step.tool, step.on, state, emit, hard_gate,
                                  args, retry_backoff)
        if verdict is not None:
            outcome = verdict
            break
    emit(ev.ToolResult(
        tool=pipeline_id, pipeline=pipeline_id, store_as="pipeline", ok=outcome.ok,
        data={"route": outcome.route} if outcome.route else None,
        error=None if outcome.ok else (outcome.error_context or f"{pipeline_id} failed"),
        duration_ms=round((time.perf_counter() - started) * 1000, 3),
    ))
    return outcome


async def _run_step(
    runner: StepRunner, pipeline_id: str, tool_id: str, on: Mapping[str, str | RetrySpec],
    state: ConversationState, emit: Emit, hard_gate: bool, args: Mapping[str, Any] | None,
    retry_backoff: float,
) -> PipelineOutcome | None:
    """None to go on with the next step, else how the pipeline ends."""
    error_context = f"{pipeline_id}:{tool_id}"
    attempt = 1
    while True:
        result = await runner.run_tool(tool_id, state=state, emit=emit, args=args,
                                       hard_gate=hard_gate, pipeline=pipeline_id, attempt=attempt)
        if result is None:
            return None  # skipped by run_once / when
        if result.ok:
            branch = on.get("ok", "continue")
        else:
            branch = on.get(f"http_{result.status}") if result.status is not None else None
            if branch is None:
                branch = on.get("failed")
        if branch is None:
            return PipelineOutcome(ok=False, error_context=error_context)
        if isinstance(branch, str):
            if branch == "continue":
                return None
            return PipelineOutcome(ok=result.ok, route=branch)
        if result.ok:
            return None  # a RetrySpec under ok never retries a success
        if is_refused(result) or attempt > branch.retry:
            return PipelineOutcome(ok=False, route=branch.on_exhaust, error_context=error_context)
        await asyncio.sleep(min(retry_backoff * attempt, 2.0))
        attempt += 1


__all__ = ["run_pipeline"]
