"""Where the tests find shared material: ``../shared`` beside the repository (CI lays it there)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
EXAMPLES = SHARED / "examples"
FIXTURES = ROOT / "tests" / "fixtures"
PLAYBOOKS = ROOT / "playbooks"
