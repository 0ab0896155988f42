"""Benchmark driver: load time of one legacy flow file, in whichever engine runs this file.

``python flow_load_driver.py ours FLOW ROUNDS`` (the project's venv) or
``python flow_load_driver.py superdialog FLOW ROUNDS`` (bench/.venvs/superdialog, superdialog
0.3.0's ``Playbook.load``). Prints one JSON object: the first load in this process (imports
and caches cold) and every later load of the same file (what a worker that loads the playbook
for each call pays), in milliseconds.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # else litellm's import waits on the network

import gc
import json
import sys
import time
from typing import Any


def main() -> int:
    engine, path, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    t0 = time.perf_counter()
    if engine == "ours":
        from superdialog_core import Playbook
    elif engine == "superdialog":
        from superdialog.playbook import Playbook  # type: ignore[no-redef]
    else:
        raise SystemExit(f"unknown engine {engine!r}: use ours or superdialog")
    imported = time.perf_counter()
    loaded: Any = Playbook.load(path)
    first = time.perf_counter() - imported
    checkpoints = sum(len(j.checkpoints) for j in loaded.journeys.values())
    times = []
    for _ in range(rounds):
        gc.collect()  # each load starts from the same heap, not from the previous load's garbage
        start = time.perf_counter()
        Playbook.load(path)
        times.append((time.perf_counter() - start) * 1000)
    print(json.dumps({"engine": engine, "import_ms": (imported - t0) * 1000, "first_ms": first * 1000,
                      "ms": times, "checkpoints": checkpoints}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
