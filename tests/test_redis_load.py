"""500 concurrent calls on one Redis: no cross-talk, no lost events (SPEC §11, scale-out)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from redis_server import RedisServer
from superdialog_core import Playbook, Runtime, ScriptedDirector, ScriptedTalker
from superdialog_core.events import Utterance
from superdialog_core.log.redis_store import RedisStore

SIMPLE = Path(__file__).resolve().parent / "fixtures" / "simple_booking.yaml"
CALLS = 500


async def test_500_concurrent_calls_share_one_redis(redis_server: RedisServer) -> None:
    # One store (one bounded pool) for every call in this process, as a worker has.
    store = RedisStore(redis_server.url, max_connections=16)
    playbook = Playbook.load(SIMPLE)
    try:
        runtimes = [
            Runtime(playbook, ScriptedDirector([{}]),
                    ScriptedTalker([f"hello {i}", f"noted {i}"]),
                    store=store, session_id=f"load-{i}")
            for i in range(CALLS)
        ]

        async def call(i: int, rt: Runtime) -> None:
            await rt.start()
            await rt.user_turn(f"caller {i} asks for a table")
            await rt.wait_idle()

        await asyncio.gather(*(call(i, rt) for i, rt in enumerate(runtimes)))
        for i, rt in enumerate(runtimes):
            log = await store.load(f"load-{i}")
            assert log is not None, f"load-{i} was never stored"
            # Every event of the call, in order, and nothing of any other call.
            assert log.to_jsonl() == rt.log.to_jsonl(), f"load-{i} differs from its runtime"
            said = [e.text for e in log if isinstance(e, Utterance)]
            assert said == [f"hello {i}", f"caller {i} asks for a table", f"noted {i}"]
            assert log[0].session_id == f"load-{i}"
        # The pool stayed bounded: 500 calls shared at most 16 connections.
        import redis.asyncio as aioredis

        async with aioredis.from_url(redis_server.url) as raw:
            clients = (await raw.info("clients"))["connected_clients"]
        assert 1 < clients <= 16 + 1  # the pool's, plus this check's own
    finally:
        await store.aclose()
