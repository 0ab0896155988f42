"""What each LiveKit reply is, and how the call starts (SPEC §10).

LiveKit asks for a reply with a ``chat_ctx``; the planner claims the user messages in it that
the log has not seen (synchronously, so overlapping streams never log one twice) and answers
with the opening, a turn, or nothing (a regeneration of a reply already given). The start
is coordinated with ``DialogAgent``: turns that arrive before it has decided how the call
starts wait, and the first of them speaks the opening before its answer.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Literal

from superdialog_core import LogCorruptError
from superdialog_core.events import Advance, Utterance

from .sync import SpeechSync, message_text


@dataclass
class Plan:
    """What one LiveKit reply is, and what to log before it.

    ``kind``: ``opening``; ``turn`` (``texts``: the new user messages, answered in order);
    ``reply`` (one Talker segment with no new user words: after a function tool's result,
    for ``generate_reply(instructions=...)``, or when the caller comes back from another
    agent, then ``decide`` asks for the returning turn's one Director call); ``none``.
    ``actions`` are logged first, in context order: ``("line", role, text, kind, agent,
    message_id)``, ``("answered", user_text, reply_text, agent, message_id)`` (a fallback
    answered the turn), ``("call", ...)`` and ``("result", ...)`` (function tools).
    """

    kind: str
    texts: list[str] = field(default_factory=list)
    instructions: str | None = None
    actions: list[tuple[Any, ...]] = field(default_factory=list)
    results: list[str] = field(default_factory=list)  # call ids of this engine's answered calls
    context_user: bool = False  # another agent's caller lines came back
    decide: bool = False


def agents_of(history: Any) -> dict[str, str]:
    """Item id -> the id of the agent that had the call when it was added (session history)."""
    owner: dict[str, str] = {}
    current: str | None = None
    for item in getattr(history, "items", ()):
        if item.type == "agent_handoff":
            current = item.new_agent_id
        elif current is not None:
            owner[item.id] = current
    return owner


def produced_by(message: Any) -> str | None:
    """The LLM that produced an assistant message (``provider/model``), None for a ``say``.

    LiveKit stamps a pipeline reply with its LLM's metadata; ``say`` lines carry none.
    """
    metrics = getattr(message, "metrics", None) or {}
    meta = metrics.get("llm_metadata") if isinstance(metrics, dict) else None
    if not meta:
        return None
    provider = meta.get("model_provider") or "unknown"
    model = meta.get("model_name") or "unknown"
    return f"{provider}/{model}"


class ReplyPlanner:
    """Plans replies for one call's runtime; see the module docstring."""

    def __init__(self, runtime_of: Callable[[], Any], speech: SpeechSync, store: Any) -> None:
        self._runtime_of = runtime_of
        self._speech = speech
        self._store = store
        self.resumed = False
        self._opened = False  # the opening ran (or the call started silently, or resumed)
        # Set when the start (opening stream or silent start) is over: turns wait for it, so
        # the runtime never runs a turn before its start finished and replies stay in order.
        self._opening_done: asyncio.Event | None = None
        self._start_decision: asyncio.Future[str] | None = None  # see hold_turns
        self._turn_waiting = False
        # Ids of the agents this LLM speaks for (DialogAgent registers itself on enter).
        self.agent_ids: set[str] = set()
        # This LLM sits in a FallbackAdapter: another LLM's reply to a caller turn is the
        # fallback's (set by DialogAgent(dialog=...), a raised attempt or a recovery probe).
        self.fallback = False

    @property
    def opened(self) -> bool:
        """The call has started (opening spoken or begun, a silent start, or a resume)."""
        return self._opened

    def opening_finished(self) -> None:
        if self._opening_done is not None:
            self._opening_done.set()

    async def prepare(self) -> bool:
        """Build the runtime and, when the store holds this session's log, adopt it.

        Returns True for a resumed call: the runtime continues from the stored log and the
        opening is not replayed. Raises ``CallStartError``/``ConfigError`` before anything is
        said when the call cannot start.
        """
        rt = self._runtime_of()
        store = self._store
        if store is None or self._opened:
            return self.resumed
        try:
            loaded = store.load(rt.session_id)
            if inspect.isawaitable(loaded):
                loaded = await loaded
        except LogCorruptError as exc:
            if not exc.torn_tail:
                raise  # damage mid-log: an error naming the line until repair() is called
            loaded = exc.prefix  # a torn last line: the runtime cuts it when it adopts the log
        # A log cut before its first advance (the worker died during the start) is no call
        # the caller heard: it is not resumed, the opening runs (the runtime re-runs its start).
        started = loaded is not None and any(isinstance(e, Advance) for e in loaded)
        if started and not self._opened:
            self.resumed = True
            await self._start_silently()  # adopts the stored log; says nothing
        return self.resumed

    def hold_turns(self) -> None:
        """Make user turns wait until the agent has decided how the call starts.

        ``DialogAgent`` calls this first thing on enter, before it awaits anything (reading the
        store may take a while). A caller who speaks meanwhile is answered by one reply that
        speaks the opening first, so nothing is skipped and nothing is heard out of order.
        """
        if self._start_decision is None and not self._opened:
            self._start_decision = asyncio.get_running_loop().create_future()

    def decide_start(self, mode: Literal["speak", "silent", "resumed"]) -> bool:
        """Release held turns. True: the caller should now generate the opening reply.

        False for ``silent``/``resumed``, and for ``speak`` when a caller turn is already
        waiting: that turn's reply speaks the opening first.
        """
        decision = self._start_decision
        if decision is not None and not decision.done():
            decision.set_result(mode)
        return mode == "speak" and not self._turn_waiting and not self._opened

    async def start_silently(self) -> None:
        """Start without speaking (an outbound call waits for the callee's first words)."""
        if not self._opened:
            await self._start_silently()

    async def _start_silently(self) -> None:
        self._opened = True
        done = self._opening_done = self._opening_done or asyncio.Event()
        try:
            await self._runtime_of().start(speak=False)
        finally:
            done.set()

    def plan(self, chat_ctx: Any, *, history: Any = None) -> Plan:
        """What this reply is (see ``Plan``), and what to log before it.

        Synchronous on purpose: new items are claimed before any await, so concurrent streams
        never log the same message twice. ``history`` is the session's history (it knows which
        agent had the call when), used to tell another agent's lines from this one's.
        """
        speech = self._speech
        ledger = speech.ledger
        assistant, unseen = ledger.scan(chat_ctx)  # one pass over the context for both
        speech.sync_messages(assistant)
        extra = ledger.scan_extra()  # instructions, function items, foreign messages
        plan = self._reconcile(extra, history) if extra else Plan("none")
        fresh = ledger.claim(unseen)
        texts = [t for t in (ledger.user_ids[m.id].strip() for m in fresh) if t]
        if texts:
            plan.kind, plan.texts = "turn", texts
        elif not self._opened:
            self._opened = True
            plan.kind = "opening"
        elif plan.instructions or plan.results or plan.decide:
            plan.kind = "reply"
        return plan

    def reconcile(self, chat_ctx: Any, *, history: Any = None) -> Plan:
        """Claim and plan the lines of ``chat_ctx`` this engine did not produce (an observed
        ``say``, a fallback's reply), with no reply of its own: user messages nobody has
        answered yet are left for the next reply."""
        speech = self._speech
        assistant, _ = speech.ledger.scan(chat_ctx)
        speech.sync_messages(assistant)
        extra = speech.ledger.scan_extra(messages_only=True)
        return self._reconcile(extra, history) if extra else Plan("none")

    def _reconcile(self, extra: list[Any], history: Any) -> Plan:
        """The unseen items (in context order) as the plan's logging actions, claimed now."""
        ledger = self._speech.ledger
        plan = Plan("none")
        owner_of = agents_of(history) if history is not None else {}
        ours = self.agent_ids
        pending: list[Any] = []  # unseen user messages no other line answered (yet)

        def agent_of(item: Any) -> str | None:
            agent = owner_of.get(item.id)
            return None if agent is None or agent in ours else agent

        for item in extra:
            kind = item.type
            if kind == "function_call":
                ledger.function_ids.add(item.id)
                if item.call_id not in ledger.call_ids:  # another agent's call
                    plan.actions.append(("call", item.call_id, item.name, item.arguments,
                                         agent_of(item) or "other"))
                continue
            if kind == "function_call_output":
                ledger.function_ids.add(item.id)
                mine = item.call_id in ledger.call_ids
                plan.actions.append(("result", item.call_id, item.name, item.output,
                                     item.is_error, None if mine else agent_of(item) or "other"))
                if mine and getattr(item, "reply_required", True):
                    plan.results.append(item.call_id)
                continue
            role = item.role
            if role == "system":
                ledger.system_ids.add(item.id)
                plan.instructions = message_text(item).strip() or plan.instructions
                continue
            if role == "user":
                agent = agent_of(item)
                if agent is not None:  # another agent had the call: context, not a turn
                    plan.actions.append(("line", "user", ledger.claim_text(item), "other_agent",
                                         agent, item.id))
                    plan.context_user = True
                else:
                    pending.append(item)
                continue
            # An assistant message this engine did not produce.
            ledger.assistant_ids.add(item.id)
            text = message_text(item).strip()
            if not text:
                continue
            agent = agent_of(item)
            model = produced_by(item)
            if agent is None and model is None:
                plan.actions.append(("line", "assistant", text, "say", None, item.id))
            elif agent is None and self.fallback:
                # A fallback LLM answered the caller's turn: logged as its reply, and the
                # Director decides the turn as usual.
                answered, pending = pending, []
                for user in answered[:-1]:
                    plan.actions.append(("answered", ledger.claim_text(user), None, model,
                                         user.id))
                if answered:
                    plan.actions.append(("answered", ledger.claim_text(answered[-1]), text,
                                         model, answered[-1].id))
                else:
                    plan.actions.append(("line", "assistant", text, "fallback", model, item.id))
            else:
                # Another agent's reply: the caller's words it answered were its turns too.
                agent = agent or model or "other"
                for user in pending:
                    plan.actions.append(("line", "user", ledger.claim_text(user), "other_agent",
                                         agent, user.id))
                    plan.context_user = True
                pending = []
                plan.actions.append(("line", "assistant", text, "other_agent", agent, item.id))
        plan.decide = plan.context_user and not pending
        return plan

    async def log_actions(self, plan: Plan) -> int | None:
        """Log what the plan found (other lines, fallback turns, function results), in order.

        Returns the version of the last other-agent user line (the returning turn's one
        Director call judges it).
        """
        rt = self._runtime_of()
        last_context: int | None = None
        for action in plan.actions:
            what = action[0]
            if what == "line":
                _, role, text, kind, agent, message_id = action
                event = await rt.log_line(role, text, kind=kind, agent=agent,
                                          message_id=message_id)
                if role == "user":
                    last_context = event.version
            elif what == "answered":
                _, user_text, reply_text, agent, message_id = action
                await rt.answered_turn(user_text, reply_text, agent=agent, message_id=message_id)
            elif what == "call":
                _, call_id, name, arguments, agent = action
                rt.function_call(call_id, name, arguments, agent=agent)
            elif what == "result":
                _, call_id, name, output, is_error, agent = action
                rt.function_result(call_id, name, output, is_error=is_error, agent=agent)
        return last_context

    async def open_reply(self, plan: Plan) -> AsyncIterator[str] | None:
        """The runtime stream for a plan (earlier user messages of a burst run as silent turns)."""
        kind, texts = plan.kind, plan.texts
        rt = self._runtime_of()
        if kind == "opening":
            self._opening_done = self._opening_done or asyncio.Event()
            # Lines before this engine had the call (another agent's, a say) come first.
            context = [{"role": a[1], "text": a[2], "kind": a[3] if a[1] == "assistant" else None,
                        "agent": a[4], "message_id": a[5]}
                       for a in plan.actions if a[0] == "line"]
            return rt.stream_start(instructions=plan.instructions, context=context)
        if kind != "turn":
            if self._opening_done is not None:
                await self._opening_done.wait()
            last_context = await self.log_actions(plan) if plan.actions else None
        if kind == "none":
            return None
        if kind == "reply":
            decide = None
            if plan.decide and last_context is not None:
                entry = rt.state.entry(last_context)
                decide = (entry.text, last_context) if entry is not None else None
            return rt.stream_reply(instructions=plan.instructions, decide=decide)
        mode = None
        if self._start_decision is not None:
            if not self._start_decision.done():
                self._turn_waiting = True
            mode = await self._start_decision
        if mode == "speak" and not self._opened:
            self._opened = True
            return self._opening_then(texts)
        if self._opening_done is not None:
            await self._opening_done.wait()
        if plan.actions:
            await self.log_actions(plan)
        if plan.instructions:
            await rt.steer(plan.instructions)
        # A first user turn before any opening (outbound call, or a plain Agent that never
        # asked for one): the runtime starts silently by itself.
        self._opened = True
        return await self._turns(texts)

    async def _turns(self, texts: list[str]) -> AsyncIterator[str]:
        rt = self._runtime_of()
        for text in texts[:-1]:
            turn = await rt.user_turn(text)
            # Its reply was never sent to LiveKit: the caller heard none of it.
            for event in turn.events:
                if isinstance(event, Utterance) and event.role == "assistant":
                    rt.mark_heard(event.version, "")
        return rt.stream_turn(texts[-1])

    async def _opening_then(self, texts: list[str]) -> AsyncIterator[str]:
        """The opening, then the reply to the caller's first words, as one stream."""
        done = self._opening_done = self._opening_done or asyncio.Event()
        said = False
        try:
            async with aclosing(self._runtime_of().stream_start()) as opening:
                async for piece in opening:
                    said = True
                    yield piece
        finally:
            done.set()
        first = True
        async with aclosing(await self._turns(texts)) as reply:
            async for piece in reply:
                if first and said and not piece[:1].isspace():
                    yield " "  # the two replies are separate segments: one joining space
                first = False
                yield piece


__all__ = ["Plan", "ReplyPlanner", "agents_of", "produced_by"]
