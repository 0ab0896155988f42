"""The LiveKit worker for superdialog playbooks: ``python worker.py dev | start | console``.

Environment:
  PLAYBOOK                  playbook path (default: playbooks/dental_booking.yaml)
  TALKER_MODEL              model URI of the Talker (default: openai/gpt-4.1-mini)
  DIRECTOR_MODEL            model URI of the Director (default: the Talker's)
  SUPERDIALOG_LLM_BASE_URL  an OpenAI-compatible server for the two models only (STT and TTS
                            keep their own settings)
  SUPERDIALOG_LOG_DIR       where call logs are kept as JSONL (default: ./logs)
  SUPERDIALOG_STORE         redis://[:password@]host:port/db (or rediss:// for TLS): keep call
                            logs in Redis instead, so a worker on any machine resumes a call
                            (the TTL is policies.log_retention_days)
  SUPERDIALOG_AGENT_NAME    agent name for explicit dispatch (default: automatic dispatch)
  SUPERDIALOG_CALL_START    call-start values for local runs (JSON; the dispatch wins)
  SUPERDIALOG_TOOLS         the playbook's python tools: module:attr or a .py file defining
                            TOOLS (default: <playbook>_tools.py next to the playbook)
  LIVEKIT_URL, LIVEKIT_API_KEY, LIVEKIT_API_SECRET   the LiveKit server

Per job: the call's values come from the SIP participant and the dispatch metadata; a call that
cannot start (bad call-start values, unset ${VARS}, python tools not found) is refused before
the greeting: a phone caller hears ``policies.start_failure_line`` and the call is hung up.

The call's session id (its log's name) is stable per call: the dispatch's ``call.session_id``
when given, else the room name. A job re-dispatched to another worker (the first one died)
finds the log in the store and resumes it without replaying the opening (SPEC §11). A room
name reused after its call ended gets a new log (``<room>.<job id>``); ``console`` runs (fake
jobs) always start a fresh one.

``policies.log_retention_days``: each job process, as it starts (prewarm), deletes the logs in
``$SUPERDIALOG_LOG_DIR`` untouched for longer than that, in a background thread (never on the
event loop, never delaying a call).
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import logging
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from livekit.agents import Agent, AgentServer, AgentSession, JobContext, JobProcess, cli

# LiveKit plugins register themselves on import, which must happen on the main thread: here,
# as the module loads, not in prewarm (``console`` runs prewarm and the job in a thread).
from livekit.plugins import openai, silero
from superdialog_core import Playbook
from superdialog_core.errors import CallStartError, ConfigError
from superdialog_core.tools.discovery import PythonTools, find_python_tools

from superdialog_livekit import DialogAgent, DialogMachineLLM, call_start_from_job
from superdialog_livekit.call import call_values_from_job, is_sip_participant

logger = logging.getLogger("superdialog_livekit.worker")

DEFAULT_PLAYBOOK = Path(__file__).resolve().parent / "playbooks" / "dental_booking.yaml"
DEFAULT_TALKER = "openai/gpt-4.1-mini"
# The worker never starts a speculative reply: it would run the Director on unfinished words.
TURN_HANDLING: dict[str, Any] = {"preemptive_generation": {"enabled": False}}


def load_playbook(env: Mapping[str, str] = os.environ) -> Playbook:
    """The playbook named by ``$PLAYBOOK`` (validated; raises PlaybookError with every problem)."""
    return Playbook.load(env.get("PLAYBOOK") or DEFAULT_PLAYBOOK)


def load_python_tools(playbook: Playbook, env: Mapping[str, str] = os.environ) -> PythonTools:
    """The playbook's python tools: ``$SUPERDIALOG_TOOLS``, else its sidecar ``<playbook>_tools.py``
    (the lookup ``chat`` and ``DialogMachineLLM`` use; ConfigError when a file cannot load)."""
    tools = find_python_tools(playbook.source_path, env=env)
    if tools.source is not None:
        logger.info("python tools from %s: %s", tools.source, ", ".join(sorted(tools)) or "none")
    return tools


def log_store(env: Mapping[str, str] = os.environ, playbook: Playbook | None = None) -> Any:
    """The worker's store: a ``RedisStore`` when ``$SUPERDIALOG_STORE`` names a Redis URL (its
    TTL from ``policies.log_retention_days``), else a ``JsonlStore`` in
    ``$SUPERDIALOG_LOG_DIR`` (default ``./logs``)."""
    url = (env.get("SUPERDIALOG_STORE") or "").strip()
    if url:
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(
                f"SUPERDIALOG_STORE={url!r} is not a Redis URL; use redis://host:6379/0 "
                "(rediss:// for TLS), or unset it to keep logs as JSONL in SUPERDIALOG_LOG_DIR"
            )
        from superdialog_core import RedisStore

        days = playbook.policies.log_retention_days if playbook is not None else None
        return RedisStore(url, retention_days=days)
    from superdialog_core import JsonlStore

    return JsonlStore(env.get("SUPERDIALOG_LOG_DIR") or "logs")


async def check_store(store: Any) -> None:
    """Make sure the store answers before a call starts (``StoreUnavailable`` naming it)."""
    ping = getattr(store, "ping", None)
    if ping is not None:
        await ping()


def purge_expired_logs(playbook: Playbook, store: Any) -> threading.Thread | None:
    """Apply ``policies.log_retention_days`` to ``store`` in a background thread (SPEC §16).

    Returns the thread (``None`` when the playbook keeps logs forever). A failure is logged, never
    raised: another job process purges again when it starts.
    """
    days = playbook.policies.log_retention_days
    if days is None or store is None:
        return None

    async def run() -> list[str]:
        try:
            return await store.purge_expired(days)
        finally:
            close = getattr(store, "aclose", None)  # a RedisStore's pool lives on this loop
            if close is not None:
                await close()

    def purge() -> None:
        try:
            expired = asyncio.run(run())
        except Exception:
            logger.warning("purging call logs older than %d days failed", days, exc_info=True)
            return
        if expired:
            logger.info("purged %d call log(s) older than %d days", len(expired), days)

    thread = threading.Thread(target=purge, name="superdialog-log-retention", daemon=True)
    thread.start()
    return thread


def prewarm(proc: JobProcess) -> None:
    """Once per job process: the VAD, the validated playbook and its python tools, the value
    parsers, and the log retention (``policies.log_retention_days``, in a background thread)."""
    from superdialog_core.turn.startup import language_of
    from superdialog_core.values.coerce import warm_up

    playbook = load_playbook()
    proc.userdata["playbook"] = playbook
    proc.userdata["python_tools"] = load_python_tools(playbook)
    purge_expired_logs(playbook, log_store(playbook=playbook))
    proc.userdata["vad"] = silero.VAD.load()
    warm_up(language_of(playbook))
    # What is loaded now (LiveKit, the models, the playbook, the parsers) lives as long as the
    # process. Move it out of the collector's generations, so a full collection during a call
    # scans only the call's own objects: the benchmark caught generation-2 passes over the
    # imported modules taking 100+ ms inside a reply's time-to-first-token window.
    gc.collect()
    gc.freeze()


_UNSAFE_ID = re.compile(r"[^A-Za-z0-9._:@+=-]")


def safe_session_id(name: str) -> str:
    """``name`` if it can name a log file, else a safe form: unsafe characters replaced and a
    short hash of the name appended, so two names never share a log."""
    safe = _UNSAFE_ID.sub("_", name)
    if name and safe == name and len(name) <= 200 and name[0] not in ".:@+=-":
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:12]
    return f"id_{safe[:180]}-{digest}"


def call_session_id(ctx: Any, call: Mapping[str, Any] | None = None) -> str | None:
    """The call's session id, stable across workers: the dispatch's, else the room name.

    A fake job (``console``, tests) has no failover and reuses one room name for every run, so
    it gets a fresh id (``None``) unless the dispatch names one. ``None`` without a room name.
    """
    given = (call or {}).get("session_id")
    if given:
        return safe_session_id(str(given))
    is_fake = getattr(ctx, "is_fake_job", None)
    if callable(is_fake) and is_fake():
        return None
    job_room = getattr(getattr(ctx, "job", None), "room", None)
    name = getattr(job_room, "name", "") or getattr(getattr(ctx, "room", None), "name", "") or ""
    return safe_session_id(name) if name else None


async def room_session_id(ctx: Any, store: Any) -> str | None:
    """The room's session id for a new job, unless its stored log has already ended.

    An ended log means the room name was reused for a new call (a failover never needs to
    resume a finished call): that call gets its own id, the room name plus the job id.
    """
    from superdialog_core.events import SessionEnd

    session_id = call_session_id(ctx)
    if session_id is None or store is None:
        return session_id
    try:
        log = await store.load(session_id)
    except Exception:
        return session_id  # the call's own start reports it (and repairs nothing silently)
    if log is not None and any(isinstance(event, SessionEnd) for event in log):
        job_id = str(getattr(getattr(ctx, "job", None), "id", "") or "job")
        return safe_session_id(f"{session_id}.{job_id}")
    return session_id


def build_dialog(playbook: Playbook, *, call_start: Mapping[str, Any] | None,
                 call: Mapping[str, Any] | None, env: Mapping[str, str] = os.environ,
                 store: Any = None, session_id: str | None = None,
                 python_tools: Mapping[str, Any] | None = None) -> DialogMachineLLM:
    """The call's DialogMachineLLM from the model URIs in ``env`` (ConfigError on a bad URI).

    ``session_id`` names the call's log (``call_session_id``); a stored log of that id resumes.
    ``python_tools`` defaults to ``load_python_tools`` (the job process loads them in prewarm).
    """
    talker = env.get("TALKER_MODEL") or DEFAULT_TALKER
    director = env.get("DIRECTOR_MODEL") or None
    if store is None:
        store = log_store(env, playbook)
    if python_tools is None:
        python_tools = load_python_tools(playbook, env)
    return DialogMachineLLM(
        playbook, talker=talker, director=director, call_start=call_start, call=call,
        store=store, session_id=session_id, base_url=env.get("SUPERDIALOG_LLM_BASE_URL") or None,
        python_tools=python_tools,
    )


def build_session(dialog: DialogMachineLLM, *, vad: Any) -> AgentSession:
    """The per-call AgentSession: OpenAI STT/TTS, the given VAD, the playbook as the LLM."""
    return AgentSession(stt=openai.STT(), tts=openai.TTS(), vad=vad, llm=dialog,
                        turn_handling=TURN_HANDLING)


def prepare_call(ctx: JobContext, playbook: Playbook, participant: Any = None,
                 env: Mapping[str, str] = os.environ, *, session_id: str | None = None,
                 store: Any = None, python_tools: Mapping[str, Any] | None = None,
                 ) -> DialogMachineLLM:
    """Read call values and call-start values and build the call's runtime.

    The session id is the dispatch's ``call.session_id``, else ``session_id`` (the entrypoint
    passes ``room_session_id``), else ``call_session_id``. Raises ``CallStartError`` or
    ``ConfigError`` (every problem listed) before anything is said.
    """
    call = call_values_from_job(ctx, participant)
    call_start = call_start_from_job(ctx, playbook)
    given = call.get("session_id")
    dialog = build_dialog(playbook, call_start=call_start, call=call, env=env, store=store,
                          session_id=safe_session_id(str(given)) if given
                          else session_id or call_session_id(ctx, call),
                          python_tools=python_tools)
    _ = dialog.runtime  # builds the runtime now: unset ${VARS} or bad values fail here
    return dialog


async def refuse_call(ctx: JobContext, playbook: Playbook, *, vad: Any, phone: bool,
                      session: AgentSession | None = None) -> None:
    """A call that cannot start: a phone caller hears the start-failure line, then hangs up.

    ``session`` is for tests (a text-mode session); the worker builds one with TTS in the room.
    """
    if not phone:
        ctx.shutdown(reason="call refused: call-start values or configuration invalid")
        return
    if session is None:
        session = AgentSession(tts=openai.TTS(), vad=vad)
        await session.start(Agent(instructions=""), room=ctx.room)
    handle = session.say(playbook.policies.start_failure_line, allow_interruptions=False)
    await handle
    await ctx.delete_room()
    session.shutdown()


async def entrypoint(ctx: JobContext) -> None:
    """One call: wait for the caller, read the call's values, run the playbook."""
    playbook = ctx.proc.userdata.get("playbook")
    if playbook is None:  # no prewarm ran in this process: load and apply retention here
        playbook = load_playbook()
        purge_expired_logs(playbook, log_store(playbook=playbook))
    vad = ctx.proc.userdata.get("vad")
    python_tools = ctx.proc.userdata.get("python_tools")
    await ctx.connect()
    participant = await ctx.wait_for_participant()
    store = ctx.proc.userdata.get("store")
    if store is None:  # one store (one bounded Redis pool) for every job of this process
        store = ctx.proc.userdata["store"] = log_store(playbook=playbook)
    try:
        await check_store(store)
    except ConnectionError as exc:  # StoreUnavailable: the message names the URL
        logger.error("call refused before the greeting: the log store is unavailable: %s", exc)
        await refuse_call(ctx, playbook, vad=vad, phone=is_sip_participant(participant))
        return
    session_id = await room_session_id(ctx, store)
    try:
        dialog = prepare_call(ctx, playbook, participant, session_id=session_id, store=store,
                              python_tools=python_tools)
    except (CallStartError, ConfigError) as exc:
        logger.error("call refused before the greeting:\n%s", exc)
        await refuse_call(ctx, playbook, vad=vad, phone=is_sip_participant(participant))
        return
    session = build_session(dialog, vad=vad)
    await session.start(DialogAgent(dialog), room=ctx.room)


server = AgentServer(setup_fnc=prewarm)
server.rtc_session(entrypoint, agent_name=os.environ.get("SUPERDIALOG_AGENT_NAME", ""))


if __name__ == "__main__":
    cli.run_app(server)
