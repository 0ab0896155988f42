"""Time to first token through a real LiveKit ``AgentSession`` in text mode (SPEC §14).

Conditions, each its own session, all driven by ``session.run(user_input=...)`` and all with
the same Talker (a LiveKit ``llm.LLM`` whose first token comes after 150 ms, then one word every
10 ms):

- ``plain``: that LLM in a plain ``Agent``, the baseline;
- ``ours``: ``DialogMachineLLM`` with that LLM as Talker, at a soft gate without ``never_say``;
- ``ours_never_say``: the same with ``never_say`` on the checkpoint (the stream filter runs);
- ``ours_hard_gate``: the checkpoint made hard and a 300 ms Director (the barrier waits for it).

TTFT is measured from the ``session.run`` call to the first text chunk leaving the agent's
``llm_node`` (the same overridden node in every condition, so what LiveKit does downstream is
identical). Conditions take turns, in a rotating order, so the machine's fast and slow phases
fall on all of them alike. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import sys
import time
from collections.abc import AsyncIterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from harness import ModelTimer, percentile
from ours_driver import BenchDirector
from script import talker_reply, user_line

PLAYBOOK = Path(__file__).parents[1] / "booking.yaml"
NEVER_SAY_LINE = '        never_say: ["fully booked"]\n'
COLLECT_GATE = 'goal: "Have party size, date and time"\n        gate: soft'


def playbook_text(*, never_say: bool, hard: bool) -> str:
    """``booking.yaml`` with or without the collect step's never_say, soft or hard."""
    text = PLAYBOOK.read_text()
    if NEVER_SAY_LINE not in text or COLLECT_GATE not in text:
        raise SystemExit("bench/booking.yaml changed: update ttft_driver.playbook_text")
    if not never_say:
        text = text.replace(NEVER_SAY_LINE, "")
    if hard:
        text = text.replace(COLLECT_GATE, COLLECT_GATE.replace("soft", "hard"))
    return text


def build(first_token_s: float, token_s: float) -> tuple[type, type]:
    """The talker LLM and the timing agent (built here so the module imports without LiveKit)."""
    from livekit.agents import DEFAULT_API_CONNECT_OPTIONS, Agent, APIConnectOptions, llm, utils

    class SlowTalkerLLM(llm.LLM):
        """A LiveKit LLM: the scripted reply of ``turn``, first word after ``first_token_s``."""

        def __init__(self) -> None:
            super().__init__()
            self.turn = 0
            self.chat_at: float | None = None  # first chat() of the current turn

        @property
        def model(self) -> str:
            return "bench-talker"

        @property
        def provider(self) -> str:
            return "bench"

        def chat(self, *, chat_ctx: Any, tools: Any = None,
                 conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
                 **kwargs: Any) -> Any:
            if self.chat_at is None:
                self.chat_at = time.perf_counter()
            return SlowStream(self, chat_ctx=chat_ctx, tools=tools or [],
                              conn_options=conn_options)

    class SlowStream(llm.LLMStream):
        async def _run(self) -> None:
            words = talker_reply(self._llm.turn).split(" ")  # type: ignore[attr-defined]
            rid = utils.shortuuid("bench_")
            await asyncio.sleep(first_token_s)
            for i, word in enumerate(words):
                if i:
                    await asyncio.sleep(token_s)
                piece = word if i == len(words) - 1 else word + " "
                self._event_ch.send_nowait(llm.ChatChunk(
                    id=rid, delta=llm.ChoiceDelta(role="assistant", content=piece)))

    class TimedAgent(Agent):
        """Records when the first text chunk of a reply leaves ``llm_node``."""

        first_at: float | None = None
        node_at: float | None = None

        async def llm_node(self, chat_ctx: Any, tools: Any,
                           model_settings: Any) -> AsyncIterable[Any]:
            if self.node_at is None:
                self.node_at = time.perf_counter()
            async for chunk in Agent.default.llm_node(self, chat_ctx, tools, model_settings):
                if self.first_at is None:
                    text = chunk if isinstance(chunk, str) else (
                        chunk.delta.content if getattr(chunk, "delta", None) else None)
                    if text:
                        self.first_at = time.perf_counter()
                yield chunk

    return SlowTalkerLLM, TimedAgent


async def run(rounds: int, warm: int, first_token_s: float, token_s: float,
              director_s: float) -> dict[str, Any]:
    from livekit.agents import AgentSession
    from superdialog_core import Playbook

    from superdialog_livekit import DialogMachineLLM

    SlowTalkerLLM, TimedAgent = build(first_token_s, token_s)
    conditions: dict[str, dict[str, Any]] = {}

    def add(name: str, talker: Any, session_llm: Any, director: BenchDirector | None) -> None:
        conditions[name] = {"talker": talker, "llm": session_llm, "director": director,
                            "agent": TimedAgent(instructions="You are Maya, the host."),
                            "ttft_ms": [], "errors": 0, "split": [], "gc_hit": []}

    plain = SlowTalkerLLM()
    add("plain", plain, plain, None)
    for name, never_say, hard, delay in (
        ("ours", False, False, 0.0),
        ("ours_never_say", True, False, 0.0),
        ("ours_hard_gate", False, True, director_s),
    ):
        talker, director = SlowTalkerLLM(), BenchDirector(ModelTimer())
        director.delay = delay
        pb = Playbook.from_yaml(playbook_text(never_say=never_say, hard=hard))
        add(name, talker, DialogMachineLLM(pb, talker=talker, director=director), director)

    sessions = []
    for c in conditions.values():
        session = AgentSession(llm=c["llm"], vad=None, turn_handling={
            "turn_detection": None, "preemptive_generation": {"enabled": False}})
        await session.start(c["agent"])
        c["session"] = session
        sessions.append(session)

    # Collections, timed: a long one inside a turn's TTFT window explains an outlier there.
    collections: list[tuple[float, float, int]] = []  # (start, end, generation)
    gc_start = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_start[0] = time.perf_counter()
        else:
            collections.append((gc_start[0], time.perf_counter(), int(info["generation"])))

    gc.callbacks.append(on_gc)

    async def one(c: dict[str, Any], n: int) -> float | None:
        c["talker"].turn = n
        c["talker"].chat_at = None
        if c["director"] is not None:
            c["director"].turn = n
        agent = c["agent"]
        agent.first_at = agent.node_at = None
        t0 = time.perf_counter()
        try:
            await c["session"].run(user_input=user_line(n))
        except Exception as exc:  # reported, not hidden: the figure would be meaningless
            c["errors"] += 1
            c.setdefault("error", repr(exc))
            return None
        if agent.first_at is None:
            c["errors"] += 1
            c.setdefault("error", f"turn {n}: no text reached llm_node")
            return None
        talker_at = c["talker"].chat_at or agent.first_at
        c["split"].append((
            ((agent.node_at or t0) - t0) * 1000,  # LiveKit: run() to the agent's llm_node
            (talker_at - (agent.node_at or t0)) * 1000,  # the LLM plugin before the Talker call
            (agent.first_at - talker_at - first_token_s) * 1000,  # Talker call to first chunk
        ))
        # GC time that fell inside this turn's TTFT window (ms)
        c["gc_hit"].append(sum(
            (min(b, agent.first_at) - max(a, t0)) * 1000
            for a, b, _ in collections if b > t0 and a < agent.first_at))
        return (agent.first_at - t0) * 1000

    names = list(conditions)
    try:
        for n in range(warm + rounds):
            order = names[n % len(names):] + names[: n % len(names)]
            for name in order:
                ms = await one(conditions[name], n)
                if ms is not None and n >= warm:
                    conditions[name]["ttft_ms"].append(ms)
                elif ms is not None:
                    conditions[name]["split"].pop()
                    conditions[name]["gc_hit"].pop()
    finally:
        gc.callbacks.remove(on_gc)
        for session in sessions:
            await session.aclose()

    out: dict[str, Any] = {
        "first_token_ms": first_token_s * 1000, "token_ms": token_s * 1000,
        "director_ms_hard_gate": director_s * 1000, "rounds": rounds, "warm_turns": warm,
        "conditions": {},
        "gc_longest_ms_by_generation": {
            str(g): max(((b - a) * 1000 for a, b, gen in collections if gen == g), default=0.0)
            for g in (0, 1, 2)},
        "gc_collections_by_generation": {
            str(g): sum(1 for *_, gen in collections if gen == g) for g in (0, 1, 2)},
    }
    for name, c in conditions.items():
        v = c["ttft_ms"]
        out["conditions"][name] = {
            "ttft_ms": v, "p50": percentile(v, 50), "p95": percentile(v, 95),
            "errors": c["errors"], **({"error": c["error"]} if "error" in c else {}),
            # where the time goes, p50 of each part (ms): run() -> llm_node, llm_node -> the
            # Talker's chat() call, chat() -> first chunk at llm_node minus the model's delay
            # measured turns whose TTFT window contained ≥ 5 ms of garbage collection
            "turns_hit_by_gc": sum(1 for ms in c["gc_hit"] if ms >= 5),
            "gc_ms_in_window_max": max(c["gc_hit"], default=0.0),
            "split_p50_ms": {
                part: percentile([row[i] for row in c["split"]], 50)
                for i, part in enumerate(("to_llm_node", "to_talker_call", "talker_to_node_extra"))
            },
        }
        if c["director"] is not None:
            state = c["llm"].runtime.state
            out["conditions"][name]["checkpoint"] = state.checkpoint
    # paired differences: the same turn number under both conditions, machine phase shared
    base = conditions["plain"]["ttft_ms"]
    for name in names[1:]:
        other = conditions[name]["ttft_ms"]
        diffs = [b - a for a, b in zip(base, other, strict=False)]
        out["conditions"][name]["paired_diff_p50"] = percentile(diffs, 50)
        out["conditions"][name]["paired_diff_p95"] = percentile(diffs, 95)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warm", type=int, default=3)
    parser.add_argument("--first-token-ms", type=float, default=150.0)
    parser.add_argument("--token-ms", type=float, default=10.0)
    parser.add_argument("--director-ms", type=float, default=300.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    # As a production worker does after its prewarm (worker.py), for every condition alike:
    # the loaded modules leave the collector's generations.
    import livekit.agents
    import livekit.plugins.openai  # noqa: F401

    import superdialog_livekit.llm  # noqa: F401

    gc.collect()
    gc.freeze()
    print(json.dumps(asyncio.run(run(args.rounds, args.warm, args.first_token_ms / 1000,
                                     args.token_ms / 1000, args.director_ms / 1000))))


if __name__ == "__main__":
    main()
