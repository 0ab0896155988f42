"""superdialog_core: the playbook engine. It never imports LiveKit (a test proves it).

Public names are resolved lazily so ``import superdialog_core`` stays cheap and a module that
is not needed (tools, dateparser) is not imported until used.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "Playbook": "playbook",
    "PlaybookError": "errors",
    "Problem": "errors",
    "ConfigError": "errors",
    "CallStartError": "errors",
    "evaluate": "expr",
    "compile_expr": "expr",
    "ExprError": "expr",
    "EventLog": "log",
    "ConversationState": "state",
    "Runtime": "runtime",
    "Turn": "runtime",
    "DirectorModel": "models",
    "TalkerModel": "models",
    "DirectorRequest": "models",
    "TalkerRequest": "models",
    "ScriptedDirector": "models",
    "ScriptedTalker": "models",
    "LogStore": "stores",
    "MemoryStore": "stores",
    "JsonlStore": "stores",
    "SQLiteStore": "sqlite_store",
}

__all__ = [*sorted(_EXPORTS), "events"]


def __getattr__(name: str) -> Any:
    if name == "events":
        return importlib.import_module(".events", __name__)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'superdialog_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
