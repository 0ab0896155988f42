"""superdialog_core: the playbook engine. It never imports LiveKit (a test proves it).

Public names are resolved lazily so ``import superdialog_core`` stays cheap and a module that
is not needed (tools, dateparser) is not imported until used.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "Playbook": "format.playbook",
    "PlaybookError": "errors",
    "Problem": "errors",
    "ConfigError": "errors",
    "CallStartError": "errors",
    "TalkerFailed": "errors",
    "evaluate": "lang.expr",
    "compile_expr": "lang.expr",
    "ExprError": "lang.expr",
    "EventLog": "log.eventlog",
    "LogCorruptError": "log.eventlog",
    "ConversationState": "log.state",
    "Runtime": "turn.runtime",
    "Turn": "turn.runtime",
    "DirectorModel": "roles.models",
    "TalkerModel": "roles.models",
    "DirectorRequest": "roles.models",
    "TalkerRequest": "roles.models",
    "TalkerToolCall": "roles.models",
    "ScriptedDirector": "roles.models",
    "ScriptedTalker": "roles.models",
    "LogStore": "log.stores",
    "MemoryStore": "log.stores",
    "JsonlStore": "log.stores",
    "RepairReport": "log.stores",
    "SQLiteStore": "log.sqlite_store",
    "RedisStore": "log.redis_store",
    "StoreConflict": "log.stores",
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
