"""Start-up cost (SPEC §14: ``import superdialog_livekit`` at most 0.3 s over ``livekit.agents``).

Measured (min of 5 fresh processes, this machine): ``import livekit.agents`` 1.45 s,
``import superdialog_livekit`` 0.05 s (its names load on first use), and
``from superdialog_livekit import DialogMachineLLM, DialogAgent`` 1.54 s, of which the
plugin's own modules take ~0.04 s (superdialog_core 28 ms, msgspec 7 ms). What keeps it that
way: the libraries only a call needs load on first use. Checked in a fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys

# Loaded on first use only: templates, value parsing, spoken forms, the OpenAI plugin (URIs).
FIRST_USE = ("jinja2", "dateparser", "babel", "livekit.plugins.openai", "phonenumbers")

_PROBE = r"""
import json, sys
before = set(sys.modules)
import superdialog_livekit
bare = sorted(m for m in set(sys.modules) - before if not m.startswith("superdialog_livekit"))
from superdialog_livekit import DialogAgent, DialogMachineLLM
print(json.dumps({"bare": bare, "loaded": sorted(sys.modules)}))
"""


def test_importing_the_plugin_loads_no_heavy_library_until_first_use() -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert not [m for m in probe["bare"] if m == "livekit" or m.startswith("livekit.")]
    loaded = set(probe["loaded"])
    early = [m for m in FIRST_USE if m in loaded]
    assert early == [], f"imported at import time, needed only at first use: {early}"
