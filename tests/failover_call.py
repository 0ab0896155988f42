"""One worker process running a call on a ``RedisStore``, driven line by line (failover tests).

    python tests/failover_call.py REDIS_URL SESSION_ID

The call runs ``tests/fixtures/failover_booking.yaml`` through a real ``Runtime`` whose
Director answers by the caller's words (so a second process, resuming the stored log and
hearing the same words, decides the same); the caller line ``$STALL_ON`` stalls that turn's
reply after the decision, so a test can SIGKILL the process in the middle of a reply. Each line read
from stdin is one caller turn; each line written to stdout is a JSON object:
``{"started": ...}`` after the start, ``{"piece": ...}`` per streamed piece, ``{"done": ...}``
once a turn's events are acknowledged by the store (``version``, ``checkpoint``, ``sha256`` of
the log's JSONL). ``BOOKING_BASE`` points the booking tool at the test's loopback server.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from superdialog_core import Runtime
from superdialog_core.log.redis_store import RedisStore

PLAYBOOK = Path(__file__).resolve().parent / "fixtures" / "failover_booking.yaml"

# What the Director answers to each caller line (by the line's words, never by turn count).
VERDICTS: dict[str, dict[str, Any]] = {
    "this is ada lovelace": {"slots": {"name": "Ada Lovelace"}, "advance": "visit.day"},
    "next tuesday please": {"slots": {"day": "next Tuesday"}, "advance": "visit.book"},
    "no that is all": {"advance": "visit.done"},
}


class StallingTalker:
    """Says one sentence a word at a time; once ``stall`` is set it stops after the next word
    and never goes on (the reply is still streaming when the test kills the process)."""

    stall = False

    async def speak(self, request: Any) -> AsyncIterator[str]:
        for word in ("Thank", "you,", "let", "me", "note", "that", "down", "right", "away."):
            yield word + " "
            await asyncio.sleep(0)
            while self.stall:
                await asyncio.sleep(60)


class WordsDirector:
    """Decides from the caller's last line (the transcript's final ``caller:`` entry); the line
    ``$STALL_ON`` also stalls the Talker, so that turn's reply never finishes."""

    def __init__(self, talker: StallingTalker) -> None:
        self.talker = talker
        self.stall_on = os.environ.get("STALL_ON", "").lower()

    async def decide(self, request: Any) -> dict[str, Any]:
        last = request.messages[-1]["content"].rsplit("\n", 1)[-1]
        said = json.loads(last.removeprefix("caller: ")).lower().strip(" .!?")
        if said == self.stall_on:
            self.talker.stall = True
        return dict(VERDICTS.get(said, {}))


def say(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


async def main(url: str, session_id: str) -> None:
    store = RedisStore(url)
    async with httpx.AsyncClient(trust_env=False) as client:
        talker = StallingTalker()
        runtime = Runtime(PLAYBOOK, WordsDirector(talker), talker, store=store, session_id=session_id, http_client=client)
        opening = await runtime.start()
        await runtime.wait_idle()
        say(started=opening.text, version=runtime.log.version, checkpoint=runtime.state.checkpoint)
        loop = asyncio.get_running_loop()
        while line := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
            async for piece in runtime.stream_turn(line):
                say(piece=piece)
            await runtime.wait_idle()
            say(done=line, version=runtime.log.version, checkpoint=runtime.state.checkpoint,
                ended=runtime.ended,
                sha256=hashlib.sha256(runtime.log.to_jsonl().encode()).hexdigest())
    await store.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
