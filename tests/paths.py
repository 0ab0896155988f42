"""Where the tests find shared material.

The shared examples live in ``../shared/examples`` beside the repository (CI lays them there);
``tests/fixtures/examples`` holds copies so the suite also runs from a lone clone, and
``test_shared_copies.py`` checks the copies still match whenever the originals are present.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
FIXTURES = ROOT / "tests" / "fixtures"
SHARED_EXAMPLES = SHARED / "examples"
EXAMPLES = SHARED_EXAMPLES if SHARED_EXAMPLES.is_dir() else FIXTURES / "examples"
PLAYBOOKS = ROOT / "playbooks"
