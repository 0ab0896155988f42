"""Python tools: how a registered callable is called, decided once when the runner is built.

Accepted callables (registered by tool id in ``python_tools``):

- a LiveKit ``@function_tool`` function: ``fn(**args)``, only the keys it declares (so a
  webhook payload with extra keys still works);
- a LiveKit raw function tool (``@function_tool(raw_schema=...)``): ``fn(args)``;
- any other callable with two required positional parameters: ``fn(args, state)`` (the live
  ``ConversationState``, read-only); with one: ``fn(args)``; with none (keyword parameters
  only): ``fn(**args)``, again only the keys it declares unless it takes ``**kwargs``.

A parameter for a LiveKit ``RunContext`` (annotated so, or named ``context``/``ctx``) keeps its
default; without a default the tool is refused at construction, because playbook tools run
outside a LiveKit function call and have no context to give. Sync callables run on the event
loop (keep them quick; make I/O tools ``async``). The return value becomes JSON data.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

Style = Literal["args_state", "args", "kwargs"]


@dataclass(frozen=True)
class PythonTool:
    """A callable with its calling convention."""

    fn: Callable[..., Any]
    style: Style
    accepted: frozenset[str] | None  # kwargs style: the names it takes (None: takes **kwargs)

    async def call(self, args: Mapping[str, Any], state: Any, timeout: float) -> Any:
        """Call it, await it within ``timeout`` when async, and return JSON-native data.

        Exceptions raised by the tool propagate (the runner turns them into failed results);
        ``asyncio.TimeoutError`` when an async tool overruns; ``TypeError`` when the return
        value cannot be made JSON.
        """
        if self.style == "args_state":
            value = self.fn(dict(args), state)
        elif self.style == "args":
            value = self.fn(dict(args))
        else:
            kwargs = dict(args) if self.accepted is None else {
                k: v for k, v in args.items() if k in self.accepted
            }
            value = self.fn(**kwargs)
        if inspect.isawaitable(value):
            value = await asyncio.wait_for(value, timeout)
        try:
            return msgspec.to_builtins(value, enc_hook=str, str_keys=True)
        except (TypeError, ValueError, msgspec.EncodeError) as exc:
            raise TypeError(f"the tool returned a value that is not JSON data ({exc})") from exc


def _is_context_param(param: inspect.Parameter) -> bool:
    annotation = param.annotation
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return "RunContext" in str(text) or param.name in ("context", "ctx")


def bind_python_tool(tool_id: str, fn: Callable[..., Any]) -> PythonTool:
    """Decide how ``fn`` is called (see the module docstring); ValueError if it cannot be."""
    if not callable(fn):
        raise ValueError(f"python tool '{tool_id}': {fn!r} is not callable; register a function")
    try:
        sig = inspect.signature(fn)  # follows __wrapped__, so LiveKit tools show their function
    except (TypeError, ValueError) as exc:
        raise ValueError(f"python tool '{tool_id}': cannot read its signature ({exc})") from None
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    params = [p for p in sig.parameters.values() if p.kind not in variadic]
    context = [p for p in params if _is_context_param(p)]
    for p in context:
        if p.default is inspect.Parameter.empty:
            raise ValueError(
                f"python tool '{tool_id}': parameter '{p.name}' needs a LiveKit RunContext, which "
                "playbook tools do not have; give it a default (None) or register a wrapper"
            )
    plain = [p for p in params if p not in context]
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values())
    accepted = None if takes_kwargs else frozenset(p.name for p in plain)
    if getattr(fn, "__livekit_raw_tool_info", None) is not None:
        return PythonTool(fn, "args", None)
    if getattr(fn, "__livekit_tool_info", None) is not None:
        return PythonTool(fn, "kwargs", accepted)
    positional = [
        p for p in plain
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        and p.default is inspect.Parameter.empty
    ]
    if len(positional) >= 2:
        return PythonTool(fn, "args_state", None)
    if len(positional) == 1:
        return PythonTool(fn, "args", None)
    return PythonTool(fn, "kwargs", accepted)


__all__ = ["PythonTool", "bind_python_tool"]
