"""superdialog_livekit: run superdialog playbooks as a LiveKit Agents LLM plugin."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "DialogMachineLLM": "superdialog_livekit.llm",
    "DialogAgent": "superdialog_livekit.agent",
    "call_start_from_job": "superdialog_livekit.call",
    "call_values_from_participant": "superdialog_livekit.call",
    "CallStartError": "superdialog_core.errors",
    "ConfigError": "superdialog_core.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'superdialog_livekit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
