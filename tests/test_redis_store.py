"""RedisStore against a real redis-server on 127.0.0.1 (SPEC §11)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis_server import RedisServer, free_port
from superdialog_core import EventLog, LogStore, StoreConflict
from superdialog_core.events import SlotWrite, Utterance
from superdialog_core.log.redis_store import RedisStore
from superdialog_core.log.stores import StoreUnavailable


@pytest.fixture
async def store(redis_server: RedisServer) -> AsyncIterator[RedisStore]:
    store = RedisStore(redis_server.url)
    yield store
    await store.aclose()


def events(log: EventLog, *texts: str) -> list:
    start = log.version
    for text in texts:
        log.append(Utterance(role="user", text=text))
    return log.since(start)


async def test_round_trip_in_batches_and_the_protocol(store: RedisStore) -> None:
    assert isinstance(store, LogStore)
    assert await store.load("call-1") is None
    log = EventLog()
    await store.append("call-1", events(log, "hello", "there"))
    await store.append("call-1", events(log, "again"))
    loaded = await store.load("call-1")
    assert loaded is not None and loaded.to_jsonl() == log.to_jsonl()
    assert await store.load("call-2") is None  # no cross-talk between sessions


async def test_two_writers_never_both_append(store: RedisStore, redis_server: RedisServer) -> None:
    log = EventLog()
    await store.append("call-1", events(log, "hi"))
    first, second = EventLog(list(log)), EventLog(list(log))  # two workers resumed at v1
    other = RedisStore(redis_server.url)
    try:
        await store.append("call-1", events(first, "from worker A"))
        with pytest.raises(StoreConflict) as caught:
            await other.append("call-1", events(second, "from worker B"))
        assert caught.value.expected == 1 and caught.value.stored == 2
        assert "another writer" in str(caught.value)
        stored = await store.load("call-1")
        assert [e.text for e in stored] == ["hi", "from worker A"]
        assert [e.version for e in stored] == [1, 2]
    finally:
        await other.aclose()


async def test_concurrent_writers_exactly_one_wins(store: RedisStore, redis_server: RedisServer) -> None:
    base = EventLog()
    await store.append("race", events(base, "start"))
    writers = [RedisStore(redis_server.url) for _ in range(8)]
    try:
        outcomes = await asyncio.gather(*(
            w.append("race", events(EventLog(list(base)), f"writer {i}"))
            for i, w in enumerate(writers)), return_exceptions=True)
        assert sum(o is None for o in outcomes) == 1
        assert all(isinstance(o, StoreConflict) for o in outcomes if o is not None)
        assert (await store.load("race")).version == 2
    finally:
        for w in writers:
            await w.aclose()


async def test_a_retried_append_is_acknowledged_once(store: RedisStore) -> None:
    """The reply of an append was lost: sending the same batch again neither doubles it nor
    calls it a conflict."""
    log = EventLog()
    batch = events(log, "one", "two")
    await store.append("call-1", batch)
    await store.append("call-1", batch)
    assert [e.version for e in await store.load("call-1")] == [1, 2]


async def test_a_retry_that_grew_while_waiting_stores_only_the_new_events(store: RedisStore) -> None:
    """The runtime retries with ``log.since(persisted)``, which has grown during the backoff:
    when the lost attempt was stored after all, the retry is that batch plus newer events. The
    stored part is acknowledged and the rest appended (not a conflict that stops the writer)."""
    log = EventLog()
    first = events(log, "one", "two")
    await store.append("call-1", first)  # stored, but the runtime never saw the reply
    retry = [*first, *events(log, "three")]
    await store.append("call-1", retry)
    loaded = await store.load("call-1")
    assert loaded is not None and loaded.to_jsonl() == log.to_jsonl()
    other = EventLog(list(log)[:2])  # a batch that differs in the overlap is still a conflict
    with pytest.raises(StoreConflict):
        await store.append("call-1", [*first, *events(other, "not three"), *events(other, "x")])


async def test_a_gap_is_refused_and_nothing_is_written(store: RedisStore) -> None:
    log = EventLog()
    batch = events(log, "one", "two", "three")
    with pytest.raises(ValueError, match="version 3 where 1 was expected"):
        await store.append("call-1", batch[2:])
    assert await store.load("call-1") is None
    unstamped = [Utterance(role="user", text="x")]
    with pytest.raises(ValueError, match="not stamped"):
        await store.append("call-1", unstamped)


async def test_retention_sets_a_ttl_and_purge_and_erase_delete(redis_server: RedisServer) -> None:
    import redis.asyncio as aioredis

    store = RedisStore(redis_server.url, retention_days=7)
    raw = aioredis.from_url(redis_server.url)
    try:
        log = EventLog()
        await store.append("old", events(log, "hi"))
        ttl = await raw.ttl(store.key("old"))
        assert 7 * 86_400 - 5 <= ttl <= 7 * 86_400
        await store.append("new", events(EventLog(), "hi"))
        import time
        assert await store.purge_expired(7, now=time.time() + 8 * 86_400) == ["new", "old"]
        assert await store.load("old") is None
        await store.append("x", events(EventLog(), "hi"))
        assert await store.erase("x") is True and await store.erase("x") is False
        with pytest.raises(ValueError, match="whole number of days"):
            RedisStore(redis_server.url, retention_days=0)
    finally:
        await store.aclose()
        await raw.aclose()


async def test_repair_keeps_the_valid_prefix_and_sets_the_list_aside(store: RedisStore,
                                                                      redis_server: RedisServer) -> None:
    import redis.asyncio as aioredis

    log = EventLog()
    await store.append("call-1", events(log, "one", "two"))
    raw = aioredis.from_url(redis_server.url)
    try:
        await raw.rpush(store.key("call-1"), b'{"type":"utterance","ver')  # a torn write
        from superdialog_core.log.eventlog import LogCorruptError
        with pytest.raises(LogCorruptError) as caught:
            await store.load("call-1")
        assert caught.value.line == 3 and "#superdialog:{call-1}:log" in str(caught.value)
        report = await store.repair("call-1")
        assert report is not None and report.repaired and report.log.version == 2
        assert (report.cut_records, report.line) == (1, 3)
        assert report.cut_bytes == len(b'{"type":"utterance","ver') + 1
        assert (await store.load("call-1")).version == 2
        aside = [k async for k in raw.scan_iter(match=f"{store.key('call-1')}:corrupt:*")]
        assert [a.decode() for a in aside] == [report.set_aside] and await raw.llen(aside[0]) == 3
        healthy = await store.repair("call-1")  # nothing left to cut: nothing written
        assert healthy is not None and not healthy.repaired and healthy.log.version == 2
        assert await store.repair("unknown") is None
        repaired = report.log
        await store.append("call-1", events(repaired, "three"))  # appends continue the prefix
        assert (await store.load("call-1")).version == 3
        assert await store.erase("call-1")
        assert [k async for k in raw.scan_iter(match="*call-1*")] == []
    finally:
        await raw.aclose()


async def test_a_key_of_another_type_is_a_corrupt_log_not_a_driver_error(
        store: RedisStore, redis_server: RedisServer) -> None:
    import redis.asyncio as aioredis
    from superdialog_core.log.eventlog import LogCorruptError

    async with aioredis.from_url(redis_server.url) as raw:
        await raw.set(store.key("odd"), "not a list")
    with pytest.raises(LogCorruptError, match="holds a Redis string"):
        await store.load("odd")


async def test_redis_down_at_start_is_a_clear_error_naming_the_url() -> None:
    port = free_port()
    store = RedisStore(f"redis://:s3cret@127.0.0.1:{port}/0", timeout=0.5)
    with pytest.raises(StoreUnavailable) as caught:
        await store.load("call-1")
    message = str(caught.value)
    assert f"redis://:***@127.0.0.1:{port}/0" in message and "s3cret" not in message
    assert "redis-server" in message
    await store.aclose()


def test_bad_urls_are_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="redis://, rediss:// or unix://"):
        RedisStore("http://127.0.0.1:6379")


async def test_password_from_the_url(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "auth", password="pw-1") as server:
        good = RedisStore(server.url)
        await good.append("call-1", events(EventLog(), "hi"))
        assert (await good.load("call-1")).version == 1
        await good.aclose()
        bad = RedisStore(f"redis://:wrong@127.0.0.1:{server.port}/0")
        with pytest.raises(StoreUnavailable) as caught:
            await bad.load("call-1")
        assert f"redis://:***@127.0.0.1:{server.port}/0" in str(caught.value)
        assert "wrong" not in str(caught.value)
        await bad.aclose()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (made with the openssl command)."""
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.fail("the openssl command is needed to make a test certificate: apt-get install openssl")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


async def test_rediss_urls_speak_tls(tmp_path: Path, certificate: tuple[Path, Path]) -> None:
    with RedisServer(tmp_path / "tls", password="pw-2", tls=certificate) as server:
        assert server.url.startswith("rediss://:pw-2@127.0.0.1:")
        store = RedisStore(server.url)
        await store.append("call-1", events(EventLog(), "over TLS"))
        assert [e.text for e in await store.load("call-1")] == ["over TLS"]
        await store.aclose()
        plain = RedisStore(f"redis://:pw-2@127.0.0.1:{server.port}/0", timeout=1.0)
        with pytest.raises(StoreUnavailable):  # plain text to a TLS port never answers
            await plain.load("call-1")
        await plain.aclose()


async def test_weak_durability_is_warned_about_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with RedisServer(tmp_path / "weak") as server:
        store = RedisStore(server.url)
        import redis.asyncio as aioredis
        raw = aioredis.from_url(server.url)
        await raw.config_set("appendfsync", "everysec")
        with caplog.at_level(logging.WARNING, logger="superdialog_core.redis_store"):
            await store.append("a", events(EventLog(), "x"))
            await store.load("a")
        warnings = [r for r in caplog.records if "appendfsync" in r.getMessage()]
        assert len(warnings) == 1 and "everysec" in warnings[0].getMessage()
        await store.aclose()
        await raw.aclose()


async def test_slot_values_round_trip(store: RedisStore) -> None:
    log = EventLog()
    log.append(SlotWrite(key="name", value="Zoë \u2028 \"quoted\"\nline", status="provisional", by="director"))
    await store.append("call-1", log.since(0))
    assert (await store.load("call-1")).to_jsonl() == log.to_jsonl()


def test_redis_py_is_imported_only_when_a_redis_store_is_made() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import superdialog_core, superdialog_core.log.redis_store\n"
        "from superdialog_core import RedisStore, StoreConflict, Runtime\n"
        "assert 'redis' not in sys.modules, 'imported with the package'\n"
        "sys.modules['redis'] = None  # as if the extra were not installed\n"
        "try:\n"
        "    RedisStore('redis://127.0.0.1:6379/0')\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "pip install 'superdialog-livekit[redis]'" in done.stdout
