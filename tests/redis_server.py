"""A real ``redis-server`` on a free 127.0.0.1 port, owned by the test that starts it.

The server runs in the foreground of its own process (``--daemonize no``) with its data in a
temporary folder, AOF on and ``appendfsync always`` (what ``RedisStore`` documents for
"acknowledged = on disk"), no RDB snapshots, no protected mode beyond the loopback bind.
A missing binary is an error, never a skip: the set-up installs ``redis-server``.

    with RedisServer(tmp_path) as server:
        store = RedisStore(server.url)
        server.stop()      # Redis lost mid-call
        server.start()     # back, same port, same data
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    """One redis-server process on 127.0.0.1 (``url``), restartable on the same port."""

    def __init__(self, directory: Path, *, password: str | None = None,
                 tls: tuple[Path, Path] | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server is not installed; the Redis tests need it: "
                "apt-get install redis-server (./setup.sh and .ci/run install it)"
            )
        self.binary = binary
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.password = password
        self.tls = tls  # (certificate, key): serve TLS only (rediss://), the cert is its own CA
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        if self.tls is not None:
            return f"rediss://{auth}127.0.0.1:{self.port}/0?ssl_ca_certs={self.tls[0]}"
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        args = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--daemonize", "no", "--dir", str(self.directory), "--save", "",
            "--appendonly", "yes", "--appendfsync", "always", "--loglevel", "warning",
            "--logfile", str(self.directory / "redis.log"),
        ]
        if self.password:
            args += ["--requirepass", self.password]
        if self.tls is not None:
            cert, key = self.tls
            args[1:3] = ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(cert),
                         "--tls-key-file", str(key), "--tls-ca-cert-file", str(cert),
                         "--tls-auth-clients", "no"]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = (self.directory / "redis.log")
                tail = log.read_text()[-2000:] if log.exists() else ""
                raise RuntimeError(f"redis-server exited with {self.process.returncode}: {tail}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    if self.tls is not None:
                        return self  # listening; the TLS handshake is the client's test
                    sock.sendall(b"PING\r\n")
                    answer = sock.recv(64)
                if answer.startswith((b"+PONG", b"-NOAUTH")):
                    return self
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"redis-server did not answer on 127.0.0.1:{self.port} within 10 s")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL); its data stays for ``start``."""
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
