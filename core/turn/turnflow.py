"""The parts of a turn between the caller's words and the last spoken piece (SPEC §6, §7).

``TurnFlow`` belongs to one ``Runtime`` and reads its state, emit, models and options. It
runs the Director (timeout, one retry for unparseable output), applies the verdict, the turn
budget and quiescence inside the decision task, and assembles the reply in SPEC §6.5's
order: (a) at a soft gate the Talker from snapshot N, or the barrier ladder at a hard gate;
then (b)/(c) the lines that became due, in order; then (d) the follow-through.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Protocol

from ..log.events import (
    Degraded,
    Event,
    SessionEnd,
    SlotWrite,
    SpeechCorrection,
    SteeringNote,
    Utterance,
)
from ..roles.asking import ask_director
from ..roles.goodbye import is_clear_goodbye
from .quiesce import Progress
from .speaker import Speaker, finished
from .speech import Reply, Segment

if TYPE_CHECKING:
    from ..format.playbook import Playbook
    from ..log.state import ConversationState
    from ..roles.models import DirectorModel
    from ..tools.runner import ToolRunner
    from ..values.context import ValueContext

logger = logging.getLogger("superdialog_core.runtime")

TIMEOUT_LINE = "I'm sorry, we have reached the time limit for this call. Thank you, goodbye."
BUDGET_NOTE = (
    "This step is taking many turns. Wrap it up: acknowledge the caller briefly and ask only "
    "for what is still missing, in one short question."
)
_WORD = re.compile(r"[a-z0-9]{3,}")
class TurnHost(Protocol):
    """What a turn reads of its ``Runtime``: a protocol, so this module never imports the
    runtime (which builds a ``TurnFlow``) and the two import in one direction."""

    playbook: Playbook
    state: ConversationState
    session_id: str
    _director: DirectorModel
    _director_timeout: float
    _barrier_timeout: float
    _hold_timeout: float
    _on_late_line: Callable[[str], Any] | None
    _value_ctx: ValueContext
    _runner: ToolRunner
    _progress: Progress
    _speaker: Speaker
    _sink: list[Event] | None
    _started_wall: float | None
    _undelivered: list[Segment]

    def _emit(self, event: Event) -> Event: ...
    def _persist(self) -> None: ...


class TurnFlow:
    """Decision and reply assembly for one runtime (see the module docstring)."""

    def __init__(self, runtime: TurnHost) -> None:
        from ..roles import director, models  # imported with the first call, not with the package

        self.rt = runtime
        # Modules, not functions: no import-system lookup per turn, and names replaced on the
        # module (tests do) are still the ones called.
        self._prompting = director
        self._models = models

    # --- the decision (a task the runtime owns) ------------------------------------------

    async def decide(self, text: str, user_version: int) -> None:
        """Ask the Director, apply its verdict, then quiesce and apply the turn budget."""
        rt = self.rt
        try:
            verdict, latency_ms, attempts = await self._ask(text)
            before = rt.state.checkpoint
            if verdict is not None:
                self._prompting.apply_verdict(
                    verdict, state=rt.state, playbook=rt.playbook, value_ctx=rt._value_ctx,
                    user_text=text, user_version=user_version, emit=rt._emit,
                    latency_ms=latency_ms, attempts=attempts,
                )
            else:
                self._goodbye_without_verdict(text)
            await rt._progress.enter_pending()
            if not rt.state.ended and rt.state.checkpoint == before:
                self._turn_budget()
            await rt._progress.settle()
        except Exception as exc:
            # A bug must not kill the call: logged with its traceback and as an event.
            logger.exception("session %s: applying the turn failed", rt.session_id)
            rt._emit(Degraded(component="runtime", detail=f"{type(exc).__name__}: {exc}"))

    async def _ask(self, text: str) -> tuple[dict[str, Any] | None, float, int]:
        """The parsed verdict (None when the Director failed), its latency and attempt count."""
        rt = self.rt
        request = self._prompting.build_director_request(rt.state, rt.playbook, user_text=text)
        started = time.perf_counter()
        verdict, attempts = await ask_director(
            rt._director, request, timeout=rt._director_timeout,
            cap=rt.playbook.policies.caps.verdict_bytes,
            finding=lambda detail: self._degrade("director", detail),
            failure=self._director_failed)
        latency = round((time.perf_counter() - started) * 1000, 3) if verdict is not None else 0.0
        return verdict, latency, attempts

    def _goodbye_without_verdict(self, text: str) -> None:
        """The Director failed, but an unmistakable goodbye still routes to the goodbye interrupt.

        With no verdict there is no evidence the caller was going on, so only a clear goodbye
        counts (a phrase closing the utterance, no question mark): "ok see you tuesday then
        at ten" or "Goodbye? Hello?" never end the call.
        """
        rt = self.rt
        spec = next((i for i in rt.playbook.interrupts if i.kind == "goodbye"), None)
        if spec is None or spec.to == rt.state.checkpoint:
            return
        if is_clear_goodbye(text, rt.playbook.policies.goodbye_words):
            rt._progress.advance(spec.to, rule_id=f"interrupt:{spec.id}", by="interrupt")

    def _turn_budget(self) -> None:
        """Steer after N turns at one checkpoint; after N+2 route only to ``on_failure``."""
        rt = self.rt
        ref = rt.state.checkpoint
        cp = rt._progress.cps[ref]
        budget = cp.turn_budget
        turns = rt.state.user_turns_in_checkpoint
        if budget is None or turns < budget:
            return
        if turns >= budget + 2 and cp.on_failure:
            rt._progress.advance(cp.on_failure, rule_id="policy:turn_budget", by="policy")
            return
        if turns >= budget + 2:
            self._degrade("policy", f"turn_budget: {turns} turns at {ref} and no on_failure to "
                          "route to; staying here (never forced into the next step)")
        rt._emit(SteeringNote(text=BUDGET_NOTE, kind="steer"))

    def _degrade(self, component: str, detail: str) -> None:
        self.rt._emit(Degraded(component=component, detail=detail))

    def _director_failed(self, detail: str) -> None:
        """A call-level Director failure: an event that counts toward policies.model_failure,
        and a warning (the call goes on without a verdict; Director failures never raise)."""
        rt = self.rt
        rt._emit(Degraded(component="director", detail=detail, model_failure=True))
        logger.warning("session %s: the Director failed (%s in a row): %s", rt.session_id,
                       rt.state.model_failures.get("director", 0), detail)

    def model_failure_due(self) -> bool:
        """``policies.model_failure``: has one role failed ``after`` times in a row?"""
        policy = self.rt.playbook.policies.model_failure
        failures = self.rt.state.model_failures
        return (policy is not None and bool(failures) and not self.rt.state.ended
                and max(failures.values()) >= policy.after)

    async def model_failure(self, reply: Reply) -> AsyncIterator[str]:
        """End the "say that again" loop: speak the policy's line and move to ``then``
        (without one, the call ends with outcome ``model_failure``)."""
        rt = self.rt
        policy = rt.playbook.policies.model_failure
        assert policy is not None
        roles = ", ".join(f"{role} {n}x" for role, n in sorted(rt.state.model_failures.items()))
        self._degrade("policy", f"model_failure: {roles} in a row; speaking the policy line and "
                      + (f"moving to {policy.then}" if policy.then else "ending the call"))
        segment = rt._speaker.canned("line", "model_failure", policy.line)
        if segment is not None:
            async with aclosing(rt._speaker.line(reply, segment)) as pieces:
                async for piece in pieces:
                    yield piece
        if policy.then:
            rt._progress.advance(policy.then, rule_id="policy:model_failure", by="policy")
            await rt._progress.settle()
        else:
            rt._emit(SessionEnd(outcome="model_failure", reason="model_failure"))

    # --- the reply ----------------------------------------------------------------------

    async def reply(self, reply: Reply, task: asyncio.Task[None]) -> AsyncIterator[str]:
        """(a) or the ladder, then the rest once the decision is in."""
        rt = self.rt
        speaker = rt._speaker
        cp = rt._progress.cps[rt.state.checkpoint]
        if cp.gate == "hard":
            source = speaker.ladder(reply, task, barrier=rt._barrier_timeout,
                                    hold=rt._hold_timeout,
                                    extended=rt.playbook.policies.extended_timeout)
        else:
            source = speaker.first_segment(reply, "reply")
        async with aclosing(source) as pieces:
            async for piece in pieces:
                yield piece
        if reply.cut or reply.stopped:
            return
        if not await finished(task, rt._hold_timeout):
            reply.cut = True  # soft gate: the decision is slow; its lines come late
            return
        if reply.stopped:
            return
        if self.model_failure_due():
            async with aclosing(self.model_failure(reply)) as pieces:
                async for piece in pieces:
                    yield piece
        rt._undelivered = rt._progress.take_lines()
        async with aclosing(self.finish_reply(reply)) as pieces:
            async for piece in pieces:
                yield piece
        if self.model_failure_due() and not reply.stopped:
            # The follow-through's Talker failed once too often: the loop ends now.
            async with aclosing(self.model_failure(reply)) as pieces:
                async for piece in pieces:
                    yield piece
            rt._undelivered = rt._progress.take_lines()
            async with aclosing(rt._speaker.due_lines(reply, rt._undelivered)) as pieces:
                async for piece in pieces:
                    yield piece
        self._check_repair(reply)

    async def finish_reply(self, reply: Reply, *, opening: bool = False) -> AsyncIterator[str]:
        """(b)/(c) the due lines, then (d) the follow-through (or the opening's Talker segment)."""
        speaker = self.rt._speaker
        if self.rt._undelivered:
            async with aclosing(speaker.due_lines(reply, self.rt._undelivered)) as pieces:
                async for piece in pieces:
                    yield piece
        if opening and reply.texts:
            return  # the opening is its verbatim lines, else one Talker segment
        async with aclosing(speaker.follow_through(reply, opening=opening)) as pieces:
            async for piece in pieces:
                yield piece

    def _check_repair(self, reply: Reply) -> None:
        """If a Talker question asked for a value the Director captured meanwhile, note it (§6.7)."""
        rt = self.rt
        events = rt._sink or []
        asked = next((e for e in reversed(events) if isinstance(e, Utterance)
                      and e.kind == "talker"), None)
        if asked is None or "?" not in asked.text or asked.spoke_from_version is None:
            return
        question = asked.text.lower()
        for event in events:
            if (isinstance(event, SlotWrite) and event.by == "director"
                    and event.version > asked.spoke_from_version
                    and any(word in question for word in _WORD.findall(event.key.lower()))):
                rt._emit(SteeringNote(
                    kind="repair",
                    text=f"You asked for {event.key.replace('_', ' ')} again, but the caller "
                         f"already gave it ({event.value}); acknowledge it instead of re-asking.",
                ))
                return

    # --- late lines ---------------------------------------------------------------------

    async def deliver_late(self, task: asyncio.Task[None], *, barge_in: bool) -> None:
        """After a cut reply: when the decision lands, hand its lines to ``on_late_line``.

        A line is logged once, just before it is handed over (a failing hook is corrected to
        "heard nothing"); without ``on_late_line`` nothing is spoken and
        nothing is logged (the checkpoint's verbatim then stays due). After a barge-in the caller
        is talking, so only the closing lines of an ended call are delivered.
        """
        rt = self.rt
        await finished(task, None)
        lines = [*rt._undelivered, *rt._progress.take_lines()]
        rt._undelivered = []
        if not lines or rt._on_late_line is None or (barge_in and not rt.state.ended):
            rt._persist()
            return
        reply = rt._speaker.new_reply()
        for segment in lines:
            # Logged first, so the host that speaks it finds the utterance it is speaking.
            reply.begin(segment)
            reply.add(segment.text)
            logged = reply.finish()
            try:
                result = rt._on_late_line(segment.text)
                if inspect.iscoroutine(result):
                    await result
            except Exception as exc:
                logger.exception("session %s: on_late_line failed", rt.session_id)
                self._degrade("late_line", f"on_late_line failed, line not spoken: {exc!r}")
                if logged is not None:  # the caller heard none of it
                    rt._emit(SpeechCorrection(utterance_version=logged.version, heard_text=""))
        rt._persist()

    # --- policies -----------------------------------------------------------------------

    def over_time(self) -> bool:
        limit = self.rt.playbook.policies.max_call_seconds
        started = self.rt._started_wall
        return limit is not None and started is not None and time.time() - started >= limit

    async def time_up(self, reply: Reply) -> AsyncIterator[str]:
        """``policies.max_call_seconds`` passed: end with outcome ``timeout`` and a closing line."""
        rt = self.rt
        rt._emit(SessionEnd(outcome="timeout", reason="max_call_seconds"))
        segment = Segment(kind="line", spoke_from=rt.state.version, text=TIMEOUT_LINE,
                          purpose="timeout")
        async with aclosing(rt._speaker.line(reply, segment)) as pieces:
            async for piece in pieces:
                yield piece

    async def store_failed(self, reply: Reply) -> AsyncIterator[str]:
        """The store stopped answering past ``policies.store_failure``: its line, then the end."""
        rt = self.rt
        policy = rt.playbook.policies.store_failure
        rt._emit(Degraded(component="store", detail=(
            f"the log store failed {policy.after} times in a row; ending the call")))
        rt._emit(SessionEnd(outcome="error", reason="store_failure"))
        segment = Segment(kind="line", spoke_from=rt.state.version, text=policy.line,
                          purpose="store_failure")
        async with aclosing(rt._speaker.line(reply, segment)) as pieces:
            async for piece in pieces:
                yield piece

    async def store_failed_late(self) -> None:
        """``store_failed`` between turns: the line goes to ``on_late_line`` (logged first)."""
        rt = self.rt
        reply = rt._speaker.new_reply()
        async with aclosing(self.store_failed(reply)) as pieces:
            async for _ in pieces:
                pass
        text = reply.text
        try:
            result = rt._on_late_line(text) if rt._on_late_line is not None else None
            if inspect.iscoroutine(result):
                await result
        except Exception as exc:
            logger.exception("session %s: on_late_line failed", rt.session_id)
            self._degrade("late_line", f"on_late_line failed, line not spoken: {exc!r}")
        rt._persist()

    async def silence(self, reply: Reply) -> AsyncIterator[str]:
        """The caller is silent: the n-th prompt while n <= max_prompts, then route to ``then``."""
        rt = self.rt
        policy = rt.playbook.policies.silence
        if policy is None:
            return
        count = rt.state.silence_count
        if count <= policy.max_prompts:
            if not policy.prompts:
                return
            index = min(count, len(policy.prompts)) - 1
            compiled = policy._prompts[index] if index < len(policy._prompts) else None
            text = (rt._progress.render(compiled, f"policies.silence.prompts[{index}]")
                    if compiled is not None else policy.prompts[index])
            if not text:
                return
            segment = Segment(kind="prompt", spoke_from=rt.state.version, text=text,
                              purpose="silence")
            async with aclosing(rt._speaker.line(reply, segment)) as pieces:
                async for piece in pieces:
                    yield piece
            return
        if not policy.then:
            return
        rt._progress.advance(policy.then, rule_id="policy:silence", by="policy")
        async with aclosing(self._moved(reply)) as pieces:
            async for piece in pieces:
                yield piece

    async def handler(self, reply: Reply, kind: str, name: str, payload: dict[str, Any]) -> AsyncIterator[str]:
        """A webhook or timer: its handler's pipeline runs with the payload as ``args``."""
        rt = self.rt
        on = f"{kind}.{name}"
        spec = next((h for h in rt.playbook.handlers if h.on == on), None)
        if spec is None:
            return  # logged as an external event; no handler listens to it
        before = rt.state.checkpoint
        cp = rt._progress.cps[before]
        outcome = await rt._runner.run_pipeline(spec.pipeline, state=rt.state, emit=rt._emit,
                                                hard_gate=cp.gate == "hard", args=payload)
        rt._progress._write_error_context(outcome)
        if outcome.route and not rt.state.ended:
            rt._progress.advance(outcome.route, rule_id="pipeline", by="pipeline")
        async with aclosing(self._moved(reply, speak_unless_moved=before)) as pieces:
            async for piece in pieces:
                yield piece

    async def _moved(self, reply: Reply, speak_unless_moved: str | None = None) -> AsyncIterator[str]:
        """Settle after a policy or handler move and speak what became due (never silently)."""
        rt = self.rt
        await rt._progress.settle()
        rt._undelivered = rt._progress.take_lines()
        speaker = rt._speaker
        async with aclosing(speaker.due_lines(reply, rt._undelivered)) as pieces:
            async for piece in pieces:
                yield piece
        if speak_unless_moved is not None and rt.state.checkpoint == speak_unless_moved:
            return  # nothing moved: an external event does not make the agent talk
        async with aclosing(speaker.follow_through(reply)) as pieces:
            async for piece in pieces:
                yield piece


__all__ = ["BUDGET_NOTE", "TIMEOUT_LINE", "TurnFlow"]
