"""The Director-quality benchmark's set is well formed (no model runs here)."""

from __future__ import annotations

import importlib.util
import sys
from datetime import date

from superdialog_core.playbook import Playbook

from tests.paths import ROOT

QUALITY = ROOT / "bench" / "quality"


def _bench():
    spec = importlib.util.spec_from_file_location("director_quality", ROOT / "bench" / "director_quality.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules["director_quality"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_cases_cover_the_set_and_expect_only_slots_of_their_checkpoint() -> None:
    bench = _bench()
    job = bench.load_cases(None, None)
    cases = job["cases"]
    assert len(cases) >= 40 and len({c["id"] for c in cases}) == len(cases)
    playbooks = {n: Playbook.load(QUALITY / p) for n, p in bench.PLAYBOOKS.items()}
    kinds_seen = set()
    for case in cases:
        kinds = bench.slot_kinds(playbooks[case["playbook"]], case["at"])
        assert set(case["expect"]) <= set(kinds), case["id"]
        assert case["steps"][0][:2] == ["say", "caller"], case["id"]  # a first caller turn
        for key, want in case["expect"].items():
            kinds_seen.add(kinds[key])
            if want is not None and kinds[key] == "date":
                date.fromisoformat(want)
    assert {"str", "phone", "email", "date", "time", "enum"} <= kinds_seen


def test_superdialog_copies_match_our_playbooks_but_for_phone_and_email_types() -> None:
    for name in ("dental", "claim"):
        ours = Playbook.load(QUALITY / f"{name}.yaml")
        theirs = Playbook.load(QUALITY / f"{name}.superdialog.yaml")
        for a, b in zip(ours.journeys[name].checkpoints, theirs.journeys[name].checkpoints, strict=True):
            assert list(a.slots) == list(b.slots)
            for key, spec in a.slots.items():
                want = "str" if spec.type in ("phone", "email") else spec.type
                assert b.slots[key].type == want, (name, key)
