"""worker.py with SUPERDIALOG_STORE=redis://...: the store it picks, its TTL, a call resumed
by another worker through Redis, and Redis down at start (SPEC §11)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from livekit import rtc
from livekit.agents.testing import fake_job_context
from redis_server import RedisServer, free_port
from superdialog_core import JsonlStore, Playbook, RedisStore
from superdialog_core.log.stores import StoreUnavailable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import worker  # noqa: E402
from tests.paths import EXAMPLES  # noqa: E402


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer) -> dict[str, str]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("CLINIC_API_BASE", "http://127.0.0.1:9")
    monkeypatch.setenv("CLINIC_API_TOKEN", "t")
    return {"PLAYBOOK": str(EXAMPLES / "dental_booking.yaml"), "TALKER_MODEL": "openai/small",
            "SUPERDIALOG_LLM_BASE_URL": "http://127.0.0.1:9/v1",
            "SUPERDIALOG_LOG_DIR": str(tmp_path / "logs"), "SUPERDIALOG_STORE": redis_server.url}


def playbook_keeping_logs(days: int) -> Playbook:
    text = (EXAMPLES / "dental_booking.yaml").read_text()
    return Playbook.from_yaml(text.replace("policies:\n", f"policies:\n  log_retention_days: {days}\n", 1))


def test_the_worker_picks_redis_from_superdialog_store(env: dict[str, str]) -> None:
    store = worker.log_store(env, playbook_keeping_logs(30))
    assert isinstance(store, RedisStore) and store.retention_days == 30
    assert isinstance(worker.log_store({**env, "SUPERDIALOG_STORE": ""}), JsonlStore)
    with pytest.raises(ValueError, match="is not a Redis URL; use redis://"):
        worker.log_store({**env, "SUPERDIALOG_STORE": "postgres://db/calls"})


async def test_a_call_resumes_on_another_worker_through_redis(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from livekit.agents import JobContext

    monkeypatch.setattr(JobContext, "is_fake_job", lambda self: False)  # a dispatched job
    playbook = worker.load_playbook(env)
    meta = json.dumps({"call_start": {"clinic_id": "berlin-1"}})
    caller = SimpleNamespace(kind=rtc.ParticipantKind.PARTICIPANT_KIND_SIP, attributes={})
    with fake_job_context(job_metadata=meta) as ctx:
        first = worker.prepare_call(ctx, playbook, caller, env=env)
        room = ctx.job.room.name
    assert isinstance(first._options["store"], RedisStore)
    assert not await first.prepare()
    await first.runtime.start(speak=False)
    await first.runtime.wait_idle()

    with fake_job_context(job_metadata=meta) as ctx:  # a worker on another machine
        second = worker.prepare_call(ctx, playbook, caller, env=env)
    assert second.session_id == room
    assert await second.prepare() and second.resumed
    assert second.runtime.log.to_jsonl() == first.runtime.log.to_jsonl()
    for dialog in (first, second):
        await dialog._options["store"].aclose()


async def test_redis_down_at_start_is_a_clear_error_naming_the_url() -> None:
    port = free_port()
    store = worker.log_store({"SUPERDIALOG_STORE": f"redis://:pw@127.0.0.1:{port}/0"})
    with pytest.raises(StoreUnavailable, match=rf"redis://:\*\*\*@127\.0\.0\.1:{port}/0"):
        await worker.check_store(store)
    await store.aclose()
    await worker.check_store(JsonlStore("unused"))  # a file store has nothing to check


async def test_prewarm_retention_purges_redis_on_its_own_thread(redis_server: RedisServer) -> None:
    import time

    import redis.asyncio as aioredis
    from superdialog_core import EventLog
    from superdialog_core.events import Utterance

    store = RedisStore(redis_server.url)
    for sid in ("old-call", "new-call"):
        log = EventLog()
        log.append(Utterance(role="user", text="hi"))
        await store.append(sid, log.since(0))
    async with aioredis.from_url(redis_server.url) as raw:  # the old call was last touched 40 days ago
        await raw.zadd("superdialog:sessions", {"old-call": time.time() - 40 * 86_400})
    thread = worker.purge_expired_logs(playbook_keeping_logs(30), RedisStore(redis_server.url))
    assert thread is not None
    thread.join(timeout=30)
    assert await store.load("old-call") is None and await store.load("new-call") is not None
    await store.aclose()
