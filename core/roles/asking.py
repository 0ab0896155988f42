"""Asking the Director for one turn's verdict, the way every turn does (SPEC §7).

One deadline (``director_timeout``) covers the whole ask, the retry and the parsing; an
unusable answer is shown back once with what was wrong; the playbook's verdict cap applies;
an answer above a few KiB is parsed in a worker thread so the event loop (every call on the
worker) stays free. The runtime's turn flow and ``replay`` both call :func:`ask_director`, so
a replay asks exactly as the call did.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable
from typing import Any

from ..values.clean import clean_text, replaced_detail
from .models import DirectorModel, DirectorRequest
from .verdict_parse import OFF_LOOP_BYTES, VerdictError, VerdictTooLarge, parse_verdict_counted

# Python 3.11+: a deadline on the awaiting task itself. asyncio.wait_for on 3.11 runs the model
# call in a task of its own, which costs a task and an extra event-loop pass per turn (3.12's
# wait_for is this same context manager).
_TIMEOUT = getattr(asyncio, "timeout", None)


async def within(awaitable: Any, seconds: float) -> Any:
    """``asyncio.wait_for(awaitable, seconds)``, without its extra task where Python allows."""
    if _TIMEOUT is None or not inspect.iscoroutine(awaitable):
        return await asyncio.wait_for(awaitable, timeout=seconds)
    async with _TIMEOUT(seconds):
        return await awaitable


def answer_text(raw: Any) -> str:
    """The first 2,000 characters of a rejected answer, to show the Director on its retry."""
    if isinstance(raw, str):
        return clean_text(raw[:2000])[0]
    try:
        return clean_text(json.dumps(raw, default=str)[:2000])[0]
    except (ValueError, RecursionError):
        return f"(a {type(raw).__name__} that cannot be shown)"


async def ask_director(
    director: DirectorModel,
    request: DirectorRequest,
    *,
    timeout: float,
    cap: int,
    finding: Callable[[str], Any],
    failure: Callable[[str], Any],
) -> tuple[dict[str, Any] | None, int]:
    """The parsed verdict (None when the Director failed) and the number of attempts.

    ``finding(detail)`` reports what went wrong without failing the call (an over-cap answer,
    repaired Unicode); ``failure(detail)`` a call-level failure (error, timeout, unparseable
    after the retry), which the runtime counts toward ``policies.model_failure``.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    for attempt in (1, 2):
        try:
            raw = await within(director.decide(request), max(deadline - loop.time(), 0.001))
        except asyncio.TimeoutError:
            failure(f"no verdict within director_timeout={timeout}s; the turn goes on without one")
            return None, attempt
        except Exception as exc:  # a model error is data: the turn goes on without a verdict
            failure(f"{type(exc).__name__}: {exc}")
            return None, attempt
        try:
            if isinstance(raw, str) and len(raw) > OFF_LOOP_BYTES:
                verdict, replaced = await within(
                    asyncio.to_thread(parse_verdict_counted, raw, cap=cap),
                    max(deadline - loop.time(), 0.001))
            else:
                verdict, replaced = parse_verdict_counted(raw, cap=cap)
        except asyncio.TimeoutError:
            finding(f"no verdict within director_timeout={timeout}s (parsing the answer); "
                    "the turn goes on without one")
            return None, attempt
        except VerdictError as exc:
            if isinstance(exc, VerdictTooLarge):
                finding(f"verdict_over_cap: {exc.detail}")
            if attempt == 2:
                failure(f"unparseable verdict after one retry: {exc.detail}")
                return None, attempt
            request = DirectorRequest(
                messages=[*request.messages,
                          {"role": "assistant", "content": answer_text(raw)},
                          {"role": "user", "content": (
                              f"That answer could not be used: {exc.detail}. Answer again "
                              f"by calling {request.tool_name} with one verdict object.")}],
                schema=request.schema, tool_name=request.tool_name,
            )
            continue
        if replaced:
            finding(replaced_detail("director", replaced))
        return verdict, attempt
    raise AssertionError("unreachable: the loop returns on its second attempt")


__all__ = ["answer_text", "ask_director", "within"]
