"""superdialog 0.3.0's Director on the Director-quality cases (runs in bench/.venvs/superdialog).

Not part of the project: ``bench/director_quality.py --superdialog`` runs this file with the
throwaway Python 3.12 venv's interpreter. It reads one JSON object on stdin (the llama.cpp
server's URL, the call clock, and each case as events: opener, known values, read-back, the
caller's line), builds superdialog's own event log and state for every case, runs its
``Director.evaluate`` once with a client that asks the same local server the way superdialog's
``json_mode`` does (``response_format: json_object``, temperature 0), folds the decision, and
prints one JSON object: per case the final slot values, the raw answer, latency and prompt
tokens of the verdict call.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # else litellm's import waits on the network

import asyncio
import json
import sys
import time
from typing import Any

import httpx
from superdialog.playbook.director import Director
from superdialog.playbook.events import (
    AdvanceEvent,
    EventLog,
    SessionStartEvent,
    SlotWriteEvent,
    UtteranceEvent,
)
from superdialog.playbook.models import Playbook
from superdialog.playbook.state import ConversationState


class LocalClient:
    """superdialog's ``CompletesLLM`` over the llama.cpp server (non-streaming: usage is exact)."""

    def __init__(self, base_url: str, model: str, max_tokens: int) -> None:
        self.http = httpx.AsyncClient(base_url=base_url, timeout=600.0, trust_env=False)
        self.model = model
        self.max_tokens = max_tokens
        self.calls: list[dict[str, Any]] = []

    async def complete(self, messages: list[dict[str, str]], **kwargs: Any) -> str:
        body: dict[str, Any] = {
            "model": self.model,
            # superdialog adds private keys (``_cache_prefix``); a provider sends role and content
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
            "temperature": 0.0,
            "max_tokens": self.max_tokens,
        }
        if kwargs.get("json_mode"):
            body["response_format"] = {"type": "json_object"}
        started = time.perf_counter()
        reply = await self.http.post("/chat/completions", json=body)
        reply.raise_for_status()
        data = reply.json()
        text = data["choices"][0]["message"].get("content") or ""
        self.calls.append({"ms": (time.perf_counter() - started) * 1000.0,
                           "prompt_tokens": data.get("usage", {}).get("prompt_tokens"),
                           "text": text})
        return text


def build_log(case: dict[str, Any], anchor: str, timezone: str) -> EventLog:
    log = EventLog()
    log.append(SessionStartEvent(started_at=anchor, timezone=timezone))
    log.append(AdvanceEvent(from_checkpoint=None, to_checkpoint=case["at"], rule="init",
                            by="policy"))
    for step in case["steps"]:
        if step[0] == "say":
            _, role, text = step
            role = "user" if role == "caller" else "assistant"
            log.append(UtteranceEvent(role=role, text=text,
                                      spoke_from_version=log.version if role == "assistant" else None))
        else:  # ["write", key, value, status]: superdialog knows provisional and confirmed only
            _, key, value, status = step
            log.append(SlotWriteEvent(key=key, value=value, by="director",
                                      status="provisional" if status == "provisional" else "confirmed"))
    log.append(UtteranceEvent(role="user", text=case["say"]))
    return log


async def run(job: dict[str, Any]) -> dict[str, Any]:
    client = LocalClient(job["base_url"], job["model"], job["max_tokens"])
    playbooks = {name: Playbook.load(path) for name, path in job["playbooks"].items()}
    out = []
    for case in job["cases"]:
        playbook = playbooks[case["playbook"]]
        log = build_log(case, job["anchor"], job["timezone"])
        state = ConversationState.fold(log, playbook)
        director = Director(playbook, client)
        first = len(client.calls)
        decision = await director.evaluate(state)
        for event in decision.events:
            log.append(event.model_copy(update={"version": 0}))
        final = ConversationState.fold(log, playbook)
        calls = client.calls[first:]
        out.append({
            "id": case["id"],
            "slots": {k: v.value for k, v in final.slots.items()},
            "degraded": decision.detail if decision.degraded else None,
            "raw": calls[0]["text"] if calls else None,
            "ms": calls[0]["ms"] if calls else None,
            "prompt_tokens": calls[0]["prompt_tokens"] if calls else None,
            "calls": len(calls),
        })
        print(f"[superdialog] {case['id']}: {out[-1]['slots']}", file=sys.stderr, flush=True)
        if job.get("progress"):  # one line per case as it lands: a long run can be read early
            with open(job["progress"], "a", encoding="utf-8") as f:
                f.write(json.dumps(out[-1], ensure_ascii=False, default=str) + "\n")
    await client.http.aclose()
    return {"engine": "superdialog 0.3.0", "cases": out}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(json.load(sys.stdin))), ensure_ascii=False, default=str))
