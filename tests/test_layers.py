"""The engine's house plan holds: every import points down the map in docs/internals.md.

The map (one row per room of ``superdialog_core``: what it owns and what it may import) is
read from docs/internals.md, so the documentation and this check cannot drift apart. Imports
are read from the source with ``ast``: module-level and function-local ones count; imports
under ``if TYPE_CHECKING:`` (type hints only) must follow the map but may not close a circle
only because they are never executed.
"""

from __future__ import annotations

import ast
import importlib.util
import pkgutil
import re
from pathlib import Path

import pytest
import superdialog_core

from tests.paths import ROOT

MAP_HEADING = "## The map"
_ROW = re.compile(r"^\|\s*`([a-z_]+)/?`\s*\|[^|]*\|\s*(.*?)\s*\|\s*$")


def _room_map() -> dict[str, set[str]]:
    text = (ROOT / "docs" / "internals.md").read_text(encoding="utf-8")
    assert MAP_HEADING in text, f"docs/internals.md lost its {MAP_HEADING!r} section"
    section = text.split(MAP_HEADING, 1)[1].split("\n## ", 1)[0]
    rooms: dict[str, set[str]] = {}
    for line in section.splitlines():
        match = _ROW.match(line)
        if match:
            rooms[match.group(1)] = set(re.findall(r"`([a-z_]+)/?`", match.group(2)))
    assert len(rooms) >= 8, f"the map in docs/internals.md has too few rows: {sorted(rooms)}"
    return rooms


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {"superdialog_core": Path(superdialog_core.__file__)}
    for info in pkgutil.walk_packages(superdialog_core.__path__, "superdialog_core."):
        spec = importlib.util.find_spec(info.name)
        assert spec is not None and spec.origin, info.name
        found[info.name] = Path(spec.origin)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, bool]]:
    """``(imported module, only for type checking)`` for every import in the module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    hinted: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            hinted.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    out: list[tuple[str, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name, id(node) in hinted) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            for alias in node.names:
                child = f"{target}.{alias.name}"
                out.append((child if child in modules else target, id(node) in hinted))
    return out


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


@pytest.fixture(scope="module")
def graph() -> dict[str, list[tuple[str, bool]]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_every_module_is_in_a_room_of_the_map(graph: dict[str, list[tuple[str, bool]]]) -> None:
    rooms = _room_map()
    strays = sorted(m for m in graph if _room(m) not in rooms)
    assert strays == [], f"modules in no room of docs/internals.md's map: {strays}"


def test_imports_point_down_the_map(graph: dict[str, list[tuple[str, bool]]]) -> None:
    rooms = _room_map()
    wrong = []
    for module, imports in graph.items():
        room = _room(module)
        for target, _ in imports:
            if not target.startswith("superdialog_core"):
                continue
            other = _room(target)
            if other != room and other not in rooms.get(room, set()):
                wrong.append(f"{module} -> {target} ({room} may not import {other})")
    assert wrong == [], "imports against the map in docs/internals.md:\n" + "\n".join(wrong)


def test_no_module_imports_livekit(graph: dict[str, list[tuple[str, bool]]]) -> None:
    offenders = sorted(
        f"{module} -> {target}"
        for module, imports in graph.items()
        for target, _ in imports
        if target == "livekit" or target.startswith("livekit.")
    )
    assert offenders == [], f"superdialog_core imports LiveKit: {offenders}"


def test_no_import_circle(graph: dict[str, list[tuple[str, bool]]]) -> None:
    edges = {
        module: sorted({t for t, hint in imports if not hint and t in graph and t != module})
        for module, imports in graph.items()
    }
    # A package's __init__ is run before its modules; an import of the package itself (``from
    # . import x``) resolves to the child module above, so no edge to a parent is implied.
    circles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in edges[node]:
            if state.get(nxt) == 1:
                circles.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module)
    assert circles == [], "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_the_map_check_sees_a_bad_import(tmp_path: Path) -> None:
    # The checks above would pass on a graph they cannot read; prove the reader finds imports.
    source = tmp_path / "probe.py"
    source.write_text("from ..turn.runtime import Runtime\nif TYPE_CHECKING:\n    import livekit\n")
    modules = {"superdialog_core.turn.runtime": Path("x")}
    found = _imports("superdialog_core.lang.probe", source, modules)
    assert found == [("superdialog_core.turn.runtime", False), ("livekit", True)]


def test_the_plugin_imports_only_public_paths_and_documented_seams() -> None:
    text = (ROOT / "docs" / "internals.md").read_text(encoding="utf-8")
    start = text.index("`superdialog_livekit` (and `worker.py`) import only")
    paragraph = text[start:text.index("\n\n", start)]
    allowed = set(re.findall(r"`(superdialog_core(?:\.[a-z_]+)*)`", paragraph))
    assert "superdialog_core.turn.startup" in allowed, paragraph
    sources = [*sorted((ROOT / "superdialog_livekit").glob("*.py")), ROOT / "worker.py"]
    wrong = []
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            for name in names:
                if name.startswith("superdialog_core") and name not in allowed:
                    wrong.append(f"{path.relative_to(ROOT)}: {name}")
    assert wrong == [], "the plugin imports undocumented engine paths:\n" + "\n".join(wrong)
