"""Where a playbook's python tools come from: found the same way by every entry point.

``find_python_tools`` looks, in this order, and takes the first that is given:

1. an explicit mapping or file (``python_tools=`` in code, ``chat --tools FILE``);
2. ``$SUPERDIALOG_TOOLS``: ``package.module:attr`` (a mapping of tool id to callable) or the
   path of a Python file defining ``TOOLS``;
3. the sidecar ``<playbook>_tools.py`` next to the playbook file, defining ``TOOLS``.

The result is a ``PythonTools`` mapping that also says which source it came from and every
place that was looked at, so ``Runtime`` can name them when a ``type: python`` tool has no
implementation. A file that cannot be loaded (missing, a syntax error, no ``TOOLS``) is a
``ConfigError`` naming the file and the fix, never an empty set of tools.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError, Problem

__all__ = ["ENV_VAR", "PythonTools", "find_python_tools", "load_tools_file", "load_tools_ref",
           "sidecar_path"]

ENV_VAR = "SUPERDIALOG_TOOLS"
_FIX = "define TOOLS = {'tool_id': function, ...} in it"


class PythonTools(Mapping[str, Callable[..., Any]]):
    """Python tools by id, with ``source`` (where they came from, or None) and ``searched``
    (every place looked at, in order, each with what was found there)."""

    def __init__(self, tools: Mapping[str, Callable[..., Any]] | None = None, *,
                 source: str | None = None, searched: Sequence[str] = ()) -> None:
        self._tools = dict(tools or {})
        self.source = source
        self.searched = tuple(searched)

    def __getitem__(self, key: str) -> Callable[..., Any]:
        return self._tools[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"PythonTools({sorted(self._tools)}, source={self.source!r})"


def sidecar_path(playbook_path: str | os.PathLike[str]) -> Path:
    """``<dir>/<stem>_tools.py`` for ``<dir>/<stem>.yaml``."""
    path = Path(playbook_path)
    return path.with_name(path.stem + "_tools.py")


def _checked(tools: Any, where: str) -> dict[str, Callable[..., Any]]:
    if not isinstance(tools, Mapping):
        raise ConfigError([Problem(where, f"is a {type(tools).__name__}, not a mapping of tool id "
                                          "to callable", _FIX)])
    bad = [str(k) for k in tools if not isinstance(k, str)]
    if bad:
        raise ConfigError([Problem(where, f"tool ids must be strings, not {', '.join(bad)}")])
    return dict(tools)


# Loaded files by (path, mtime, size): several calls of one process (a worker, one
# DialogMachineLLM per call) share one module, so module-level state in the file is shared too.
_files: dict[tuple[str, int, int], dict[str, Callable[..., Any]]] = {}
_files_lock = threading.Lock()


def load_tools_file(path: str | os.PathLike[str], *, what: str | None = None) -> dict[str, Callable[..., Any]]:
    """``TOOLS`` from a Python file (the user's own code, imported once per version of the file).

    ``what`` names the file's origin in errors (``--tools``, ``$SUPERDIALOG_TOOLS``...).
    """
    file = Path(path).expanduser().resolve()
    where = f"{what} {path}" if what else str(path)
    try:
        stat = file.stat()
    except OSError as exc:
        raise ConfigError([Problem(where, f"cannot read the python tools file: {exc.strerror or exc}",
                                   "check the path")]) from None
    key = (str(file), stat.st_mtime_ns, stat.st_size)
    with _files_lock:
        cached = _files.get(key)
        if cached is not None:
            return dict(cached)
        digest = hashlib.sha256(str(file).encode()).hexdigest()[:10]
        name = f"superdialog_tools_{file.stem}_{digest}"
        spec = importlib.util.spec_from_file_location(name, file)
        if spec is None or spec.loader is None:
            raise ConfigError([Problem(where, "is not a Python file", "give a .py file")])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses and pickling look the module up by name
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(name, None)
            raise ConfigError([Problem(where, f"loading it raised {type(exc).__name__}: {exc}",
                                       "fix the error in the file")]) from exc
        if not hasattr(module, "TOOLS"):
            raise ConfigError([Problem(where, "defines no TOOLS", _FIX)])
        tools = _files[key] = _checked(module.TOOLS, f"{where}: TOOLS")
        return dict(tools)


def load_tools_ref(ref: str, *, what: str = f"${ENV_VAR}") -> dict[str, Callable[..., Any]]:
    """The mapping named by ``package.module:attr`` (imported from ``sys.path``)."""
    module_name, sep, attr = ref.partition(":")
    where = f"{what}={ref}"
    if not sep or not module_name or not attr:
        raise ConfigError([Problem(where, "is neither module:attr nor a .py file",
                                   "write package.module:TOOLS or the path of a .py file")])
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ConfigError([Problem(where, f"importing {module_name} raised {type(exc).__name__}: {exc}",
                                   "check that the module is on the Python path (PYTHONPATH)")]) from exc
    value: Any = module
    for part in attr.split("."):
        if not hasattr(value, part):
            raise ConfigError([Problem(where, f"{module_name} has no attribute {attr!r}",
                                       "name the mapping of tool id to callable")])
        value = getattr(value, part)
    return _checked(value, where)


def _listing(tools: Mapping[str, Any]) -> str:
    return ", ".join(sorted(tools)) or "no tools"


def find_python_tools(
    playbook_path: str | os.PathLike[str] | None = None,
    explicit: Mapping[str, Callable[..., Any]] | str | os.PathLike[str] | None = None,
    *,
    explicit_name: str = "python_tools=",
    env: Mapping[str, str] | None = None,
) -> PythonTools:
    """The python tools for a playbook, from the first source given (see the module docstring).

    ``explicit`` is a mapping, or the path of a file defining ``TOOLS`` (``explicit_name`` says
    how the user gave it, for messages: ``python_tools=``, ``--tools``). ``env`` defaults to
    the process environment. Raises ``ConfigError`` when a given source cannot be loaded.
    """
    environ = os.environ if env is None else env
    searched: list[str] = []
    if isinstance(explicit, PythonTools):
        return explicit  # found already (a worker's prewarm): keep where it was looked for
    if explicit is not None:
        if isinstance(explicit, Mapping):
            tools = _checked(explicit, explicit_name)
            source = explicit_name
            searched.append(f"{explicit_name} (given: {_listing(tools)})")
        else:
            tools = load_tools_file(explicit, what=explicit_name)
            source = f"{explicit_name} {explicit}"
            searched.append(f"{explicit_name} {explicit} (defines: {_listing(tools)})")
        return PythonTools(tools, source=source, searched=searched)
    searched.append(f"{explicit_name} (not given)")
    ref = (environ.get(ENV_VAR) or "").strip()
    if ref:
        is_file = ref.endswith(".py") or (os.sep in ref and ":" not in ref)
        tools = load_tools_file(ref, what=f"${ENV_VAR}") if is_file else load_tools_ref(ref)
        searched.append(f"${ENV_VAR}={ref} (defines: {_listing(tools)})")
        return PythonTools(tools, source=f"${ENV_VAR}={ref}", searched=searched)
    searched.append(f"${ENV_VAR} (not set)")
    if playbook_path is None:
        searched.append("no sidecar file (the playbook was not loaded from a file)")
        return PythonTools({}, searched=searched)
    sidecar = sidecar_path(playbook_path)
    if not sidecar.is_file():
        searched.append(f"{sidecar} (not found)")
        return PythonTools({}, searched=searched)
    tools = load_tools_file(sidecar, what="sidecar")
    searched.append(f"{sidecar} (defines: {_listing(tools)})")
    return PythonTools(tools, source=str(sidecar), searched=searched)
