"""worker.py: --help without a server, and a call's session built for a fake job."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from livekit import rtc
from livekit.agents.testing import fake_job_context
from livekit.plugins import openai
from superdialog_core import JsonlStore
from superdialog_core.errors import CallStartError, ConfigError

from superdialog_livekit import DialogMachineLLM

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import worker  # noqa: E402
from tests.paths import EXAMPLES as EXAMPLES_DIR  # noqa: E402

EXAMPLE = EXAMPLES_DIR / "dental_booking.yaml"


def test_worker_help_runs_without_a_server() -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(ROOT)}
    done = subprocess.run([sys.executable, "worker.py", "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "console" in done.stdout and "start" in done.stdout


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # openai.STT/TTS clients need some key
    monkeypatch.setenv("CLINIC_API_BASE", "http://127.0.0.1:9")
    monkeypatch.setenv("CLINIC_API_TOKEN", "t")
    monkeypatch.delenv("SUPERDIALOG_CALL_START", raising=False)
    return {
        "PLAYBOOK": str(EXAMPLE),
        "TALKER_MODEL": "openai/small-talker",
        "DIRECTOR_MODEL": "http://127.0.0.1:8090/v1#big-director",
        "SUPERDIALOG_LLM_BASE_URL": "http://127.0.0.1:8089/v1",
        "SUPERDIALOG_LOG_DIR": str(tmp_path / "logs"),
    }


def _sip_caller() -> SimpleNamespace:
    return SimpleNamespace(kind=rtc.ParticipantKind.PARTICIPANT_KIND_SIP, attributes={
        "sip.ruleID": "SDR_1", "sip.phoneNumber": "+4915112345678",
        "sip.trunkPhoneNumber": "+493012345678", "sip.callIDFull": "abc-1"})


async def test_worker_builds_the_session_for_a_fake_job(env: dict[str, str]) -> None:
    playbook = worker.load_playbook(env)
    meta = json.dumps({"call_start": {"clinic_id": "berlin-1"}})
    with fake_job_context(job_metadata=meta) as ctx:
        dialog = worker.prepare_call(ctx, playbook, _sip_caller(), env=env)
    assert isinstance(dialog, DialogMachineLLM)
    assert dialog.call_values["channel"] == "phone"
    assert dialog.call_values["calling_number"] == "+4915112345678"
    assert dialog.call_values["carrier_call_id"] == "abc-1"
    # Model URIs: the base URL reroutes openai/<model>; an explicit http URI keeps its server.
    assert (dialog._talker.llm.model, dialog._talker.llm.provider) == ("small-talker", "127.0.0.1:8089")
    assert (dialog._director.llm.model, dialog._director.llm.provider) == ("big-director", "127.0.0.1:8090")
    assert isinstance(dialog._options["store"], JsonlStore)

    session = worker.build_session(dialog, vad=None)
    assert session.llm is dialog
    assert isinstance(session.stt, openai.STT) and isinstance(session.tts, openai.TTS)
    assert session.options.preemptive_generation["enabled"] is False
    await session.aclose()


async def test_bad_call_start_is_refused_before_anything_is_built(env: dict[str, str]) -> None:
    playbook = worker.load_playbook(env)
    with fake_job_context(job_metadata=json.dumps({"call_start": {"clinic": "x"}})) as ctx, \
            pytest.raises(CallStartError) as info:
        worker.prepare_call(ctx, playbook, _sip_caller(), env=env)
    assert {p.path for p in info.value.problems} == {"call_start.clinic", "call_start.clinic_id"}
    # Nothing was saved: no call log was created for the refused call.
    logs = Path(env["SUPERDIALOG_LOG_DIR"])
    assert not logs.exists() or not any(logs.iterdir())


async def test_unset_env_variables_are_refused_before_the_greeting(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CLINIC_API_TOKEN")
    playbook = worker.load_playbook(env)
    with fake_job_context(job_metadata=json.dumps({"call_start": {"clinic_id": "c"}})) as ctx, \
            pytest.raises(ConfigError, match="CLINIC_API_TOKEN"):
        worker.prepare_call(ctx, playbook, None, env=env)


async def test_a_refused_phone_call_hears_the_start_failure_line_then_hangs_up(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from livekit.agents import Agent, AgentSession

    playbook = worker.load_playbook(env)
    deleted: list[bool] = []
    with fake_job_context(job_metadata="{}") as ctx:
        async def delete_room(room_name: str | None = None) -> None:
            deleted.append(True)

        monkeypatch.setattr(ctx, "delete_room", delete_room)
        session = AgentSession()
        await session.start(Agent(instructions=""))
        await worker.refuse_call(ctx, playbook, vad=None, phone=True, session=session)
        said = [i.text_content for i in session.history.items
                if i.type == "message" and i.role == "assistant"]
        await session.aclose()
    assert said == [playbook.policies.start_failure_line]
    assert deleted == [True]


async def test_a_restarted_worker_resumes_the_same_calls_log(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worker failover (SPEC §11): the session id is the room name, so a job re-dispatched for
    the same room finds the log in the JsonlStore and resumes it without the opening."""
    from livekit.agents import JobContext

    monkeypatch.setattr(JobContext, "is_fake_job", lambda self: False)  # a dispatched job
    playbook = worker.load_playbook(env)
    meta = json.dumps({"call_start": {"clinic_id": "berlin-1"}})
    with fake_job_context(job_metadata=meta) as ctx:
        first = worker.prepare_call(ctx, playbook, _sip_caller(), env=env)
        room = ctx.job.room.name
    assert first.session_id == room
    assert not await first.prepare()
    await first.runtime.start(speak=False)
    await first.runtime.wait_idle()
    stored = first.runtime.log.version

    with fake_job_context(job_metadata=meta) as ctx:  # another worker, the same room
        second = worker.prepare_call(ctx, playbook, _sip_caller(), env=env)
    assert second.session_id == room
    assert await second.prepare() and second.resumed
    assert second.runtime.log.version == stored  # adopted, nothing replayed

    dispatched = json.dumps({"call_start": {"clinic_id": "berlin-1"},
                             "call": {"session_id": "crm-4711"}})
    with fake_job_context(job_metadata=dispatched) as ctx:
        third = worker.prepare_call(ctx, playbook, _sip_caller(), env=env, session_id=room)
    assert third.session_id == "crm-4711"  # the dispatch's id wins


async def test_a_room_name_reused_after_its_call_ended_gets_a_new_log(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from livekit.agents import JobContext
    from superdialog_core.events import SessionEnd

    store = JsonlStore(env["SUPERDIALOG_LOG_DIR"])
    meta = json.dumps({"call_start": {"clinic_id": "berlin-1"}})
    with fake_job_context(job_id="job-1", job_metadata=meta) as ctx:
        assert await worker.room_session_id(ctx, store) is None  # console/tests: a fresh id
        monkeypatch.setattr(JobContext, "is_fake_job", lambda self: False)
        room = ctx.job.room.name
        assert await worker.room_session_id(ctx, store) == room  # nothing stored yet
        dialog = worker.prepare_call(ctx, worker.load_playbook(env), _sip_caller(), env=env,
                                     session_id=room, store=store)
        await dialog.runtime.start(speak=False)
        await dialog.runtime.wait_idle()
        assert await worker.room_session_id(ctx, store) == room  # a live call: failover resumes
        await store.append(room, [SessionEnd(outcome="booked", reason="done",
                                             version=dialog.runtime.log.version + 1)])
        assert await worker.room_session_id(ctx, store) == f"{room}.job-1"


def test_a_room_name_that_cannot_name_a_file_is_made_safe() -> None:
    from superdialog_core.log.stores import validate_session_id

    def ctx(name: str) -> SimpleNamespace:
        return SimpleNamespace(job=SimpleNamespace(room=SimpleNamespace(name=name)),
                               is_fake_job=lambda: False)

    assert worker.call_session_id(ctx("call-_+4915_abc")) == "call-_+4915_abc"
    odd = [worker.call_session_id(ctx(n)) for n in ("a/b", "a b", "../x", "a" * 300)]
    for sid in odd:
        assert sid is not None and validate_session_id(sid) == sid
    assert len(set(odd)) == 4 and worker.call_session_id(ctx("a_b")) != odd[0]
    assert worker.call_session_id(ctx("")) is None
    assert worker.call_session_id(ctx("r"), {"session_id": "crm/1"}) == worker.safe_session_id("crm/1")


def test_prewarm_applies_log_retention_days_to_the_jsonl_store(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import time

    from livekit.plugins import silero

    text = EXAMPLE.read_text()
    assert "log_retention_days" not in text
    kept = tmp_path / "retained.yaml"
    kept.write_text(text.replace("policies:\n", "policies:\n  log_retention_days: 30\n", 1))
    logs = tmp_path / "logs"
    logs.mkdir()
    old, fresh = logs / "old-call.jsonl", logs / "fresh-call.jsonl"
    for path in (old, fresh):
        path.write_text("")
    forty_days_ago = time.time() - 40 * 86400
    os.utime(old, (forty_days_ago, forty_days_ago))
    for key in ("PLAYBOOK", "SUPERDIALOG_LOG_DIR"):
        monkeypatch.setenv(key, str(kept) if key == "PLAYBOOK" else env[key])
    monkeypatch.setattr(silero.VAD, "load", staticmethod(lambda *a, **k: "vad"))
    threads: list[object] = []
    purge = worker.purge_expired_logs
    monkeypatch.setattr(worker, "purge_expired_logs",
                        lambda *a: threads.append(purge(*a)) or threads[-1])

    proc = SimpleNamespace(userdata={})
    frozen_before = gc.get_freeze_count()
    try:
        worker.prewarm(proc)  # type: ignore[arg-type]
        # the process's long-lived objects leave the collector's generations
        assert gc.get_freeze_count() > frozen_before
    finally:
        gc.unfreeze()
    assert proc.userdata["vad"] == "vad" and len(threads) == 1
    threads[0].join(10)  # type: ignore[attr-defined]
    assert not old.exists() and fresh.exists()

    # a playbook without retention keeps every log
    os.utime(fresh, (forty_days_ago, forty_days_ago))
    assert purge(worker.load_playbook(env), JsonlStore(logs)) is None
    assert fresh.exists()
