"""superdialog_core never imports LiveKit (SPEC §1): a Pipecat adapter can reuse it as is.

Each check runs in a fresh interpreter, because this test process may already have LiveKit
loaded by the plugin's tests.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_PROBE = r"""
import importlib, json, pkgutil, sys
import superdialog_core

touched, missing = [], []
for name in superdialog_core.__all__:
    try:
        getattr(superdialog_core, name)
        touched.append(name)
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("superdialog_core."):
            raise
        missing.append(name)
modules = []
for info in pkgutil.walk_packages(superdialog_core.__path__, "superdialog_core."):
    importlib.import_module(info.name)
    modules.append(info.name.removeprefix("superdialog_core."))
livekit = sorted(m for m in sys.modules if m == "livekit" or m.startswith("livekit."))
print(json.dumps({"touched": touched, "missing": missing, "modules": modules,
                  "livekit": livekit}))
"""


def _probe() -> dict[str, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"importing superdialog_core failed:\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def probe() -> dict[str, list[str]]:
    return _probe()


def test_core_and_every_public_name_leave_livekit_unimported(probe: dict[str, list[str]]) -> None:
    assert "EventLog" in probe["touched"] and "ConversationState" in probe["touched"]
    assert "log.eventlog" in probe["modules"] and "log.state" in probe["modules"]
    assert "turn.runtime" in probe["modules"] and "format.playbook" in probe["modules"]
    assert probe["livekit"] == [], f"superdialog_core imported LiveKit: {probe['livekit']}"


def test_every_public_name_resolves(probe: dict[str, list[str]]) -> None:
    # Every public name of SPEC §1 must resolve: its module exists and defines it.
    assert probe["missing"] == [], f"public names that do not resolve: {probe['missing']}"

