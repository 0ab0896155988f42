"""The built wheel holds the whole engine: every subpackage ships, every public name imports.

An editable install finds modules in the source tree, so a subpackage that pyproject.toml
forgets would pass every other test and break for users. This test builds the wheel, installs
it into a temporary venv (no dependencies: the test venv's own site-packages provide them, on
PYTHONPATH, where its editable-install hook is not read) and imports from there.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

from tests.paths import ROOT

_PROBE = r"""
import importlib, json, pkgutil, sys
import superdialog_core, superdialog_livekit
names = {n: type(getattr(superdialog_core, n)).__name__ for n in superdialog_core.__all__}
modules = sorted(i.name for i in pkgutil.walk_packages(superdialog_core.__path__, "superdialog_core."))
for m in modules:
    importlib.import_module(m)
print(json.dumps({"core": superdialog_core.__file__, "plugin": superdialog_livekit.__file__,
                  "names": names, "modules": modules,
                  "dialog": superdialog_livekit.DialogMachineLLM.__name__}))
"""


def _run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, **kwargs)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}"
    return done


def test_the_wheel_installs_every_subpackage(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
          "-w", str(dist), str(ROOT)])
    (wheel,) = dist.glob("superdialog_livekit-*.whl")
    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    python = target / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
          "--no-index", "-q", str(wheel)])
    deps = sysconfig.get_paths()["purelib"]
    done = _run([str(python), "-c", _PROBE], env={"PYTHONPATH": deps, "PATH": "/usr/bin:/bin"},
                cwd=tmp_path)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["core"].startswith(str(target)), f"superdialog_core came from {found['core']}"
    assert found["plugin"].startswith(str(target)), f"superdialog_livekit came from {found['plugin']}"
    source_modules = sorted(
        "superdialog_core." + ".".join(p.relative_to(ROOT / "core").with_suffix("").parts)
        .removesuffix(".__init__")
        for p in (ROOT / "core").rglob("*.py")
        if p.name != "__init__.py" or p.parent != ROOT / "core"
    )
    assert found["modules"] == source_modules, "modules missing from the wheel: " + ", ".join(
        sorted(set(source_modules) - set(found["modules"])))
    assert {"Playbook", "Runtime", "EventLog", "SQLiteStore", "ScriptedDirector"} <= set(found["names"])
    assert found["dialog"] == "DialogMachineLLM"
