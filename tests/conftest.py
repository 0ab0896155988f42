"""Fixtures shared by the engine's end-to-end tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from loopback import LoopbackServer, Reply
from redis_server import RedisServer


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client for tools; it talks only to the loopback server a test starts."""
    async with httpx.AsyncClient(trust_env=False) as http:
        yield http


@pytest.fixture
def clinic(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackServer]:
    """The dental example's booking API on 127.0.0.1, with its env variables pointed at it."""
    with LoopbackServer() as server:
        server.route("POST", "/clinics/c1/visits", Reply(201, json={"ref": "A1234"}))
        monkeypatch.setenv("CLINIC_API_BASE", server.base_url)
        monkeypatch.setenv("CLINIC_API_TOKEN", "t")
        yield server


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A real redis-server on a free 127.0.0.1 port, its data under ``tmp_path`` (fails, never
    skips, when the binary is missing)."""
    with RedisServer(tmp_path / "redis") as server:
        yield server
