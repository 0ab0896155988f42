"""The copies of the shared examples in tests/fixtures/examples match the originals."""

from __future__ import annotations

import pytest

from tests.paths import FIXTURES, SHARED_EXAMPLES


@pytest.mark.skipif(not SHARED_EXAMPLES.is_dir(), reason="../shared is not beside this clone")
def test_fixture_copies_match_the_shared_examples() -> None:
    originals = sorted(p.name for p in SHARED_EXAMPLES.glob("*.yaml"))
    assert originals, "no shared examples found"
    for name in originals:
        copy = FIXTURES / "examples" / name
        assert copy.is_file(), f"copy {name} into tests/fixtures/examples"
        assert copy.read_text() == (SHARED_EXAMPLES / name).read_text(), f"{name} changed upstream"
