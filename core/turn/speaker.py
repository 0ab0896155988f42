"""How a reply is spoken: Talker segments, lines, the barrier ladder, follow-through (SPEC §6.3, §6.5).

Every method that speaks is an async generator yielding text pieces; the runtime's turn
generator iterates them inside ``contextlib.aclosing`` so a barge-in closes the whole chain at
once (the Talker stream included) and ``Reply.abort`` logs exactly the yielded prefix.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

from ..errors import TalkerFailed
from ..format.playbook import Playbook
from ..log.events import Degraded, Event, FunctionCall, NoteConsumed
from ..roles.models import TalkerToolCall
from ..roles.never_say import NeverSayFilter
from ..values.clean import replaced_detail
from .quiesce import Progress
from .speech import Reply, Segment, TalkerStream, one_piece

logger = logging.getLogger("superdialog_core.runtime")

FILLER_LINE = "One moment, let me check that."
HOLD_LINE = "I'm taking a little longer than usual, please bear with me."
# Built-in recovery lines; ``policies.recovery_line`` replaces both when the author sets it.
TALKER_RECOVERY_LINE = "Sorry, could you say that again?"
LADDER_RECOVERY_LINE = "Sorry, this is taking longer than it should. I'll be right back with you."


async def finished(task: asyncio.Future[Any], timeout: float | None) -> bool:
    """Wait for ``task`` up to ``timeout`` without ever cancelling it (it belongs to the runtime).

    ``asyncio.wait({task}, timeout=timeout)`` for one task, without its set bookkeeping: a
    waiter future woken by the task's completion or by the timer, whichever comes first.
    """
    if task.done():
        return True
    if timeout is not None and timeout <= 0:
        return False
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()

    def wake(_: Any = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    task.add_done_callback(wake)
    timer = loop.call_later(timeout, wake) if timeout is not None else None
    try:
        await waiter
    finally:
        if timer is not None:
            timer.cancel()
        task.remove_done_callback(wake)
    return task.done()


class Speaker:
    """Speaks for one conversation: renders, filters and logs what the caller hears."""

    def __init__(
        self,
        playbook: Playbook,
        state: Any,
        emit: Callable[[Event], Event],
        talker: Any,
        progress: Progress,
        *,
        token_budget: int,
        raise_errors: bool = False,
    ) -> None:
        from ..roles import talker as view  # imported with the first call, not with the package

        # The module, not its functions: a function-level import on every segment costs an
        # import-system lookup, and reading the names from the module at use still sees them
        # replaced (tests do).
        self._view = view
        self.playbook = playbook
        self.state = state
        self.emit = emit
        self.talker = talker
        self.progress = progress
        self.token_budget = token_budget
        # talker_errors="raise": a Talker failure before a reply's first piece raises
        # TalkerFailed (nothing logged) instead of speaking the recovery line.
        self.raise_errors = raise_errors
        self.cps = playbook.checkpoints  # looked up once (pydantic private attribute)

    # --- bookkeeping --------------------------------------------------------------------

    def new_reply(self) -> Reply:
        return Reply(self.emit)

    def degrade(self, component: str, detail: str) -> None:
        self.emit(Degraded(component=component, detail=detail))

    def pending_verbatim(self) -> Segment | None:
        """The current checkpoint's say_verbatim when it was not yet spoken at this entry."""
        ref = self.state.checkpoint
        if ref is None:
            return None
        if ref in self.state.verbatim_spoken:  # folded from the log: once per entry
            return None
        return self.progress.verbatim_line(ref, self.state.checkpoint_entered_version)

    def never_say(self, ref: str | None) -> list[str]:
        cp = self.cps.get(ref) if ref is not None else None
        return cp.never_say if cp is not None else []

    # --- speaking -----------------------------------------------------------------------

    async def say(self, reply: Reply, segment: Segment, pieces: AsyncIterator[str]) -> AsyncIterator[str]:
        """Yield a segment's pieces (after one joining space) and log it when it ends."""
        if reply.stopped:
            return
        reply.begin(segment)
        async with aclosing(pieces) as source:  # type: ignore[type-var]
            async for piece in source:
                if reply.stopped:
                    return  # superseded by a newer turn: it already logged what we said
                if not piece:
                    continue
                if reply.separator_due():
                    yield " "
                reply.add(piece)
                yield piece
        reply.finish()

    def line(self, reply: Reply, segment: Segment) -> AsyncIterator[str]:
        """A fixed line (verbatim, exit, prompt, canned), spoken as one piece."""
        return self.say(reply, segment, one_piece(segment.text))

    def canned(self, kind: str, purpose: str, text: str) -> Segment | None:
        """A canned line with never_say phrases cut out; None when nothing speakable is left."""
        phrases = self.never_say(self.state.checkpoint)
        if phrases:
            cut = NeverSayFilter(phrases)
            text = cut.feed(text) + cut.close()
        text = text.strip()
        if not any(ch.isalnum() for ch in text):
            return None
        return Segment(kind=kind, spoke_from=self.state.version, text=text, purpose=purpose)

    async def talker_segment(self, reply: Reply, purpose: str) -> AsyncIterator[str]:
        """One Talker segment from the state as it is now; an error speaks the recovery line."""
        if reply.stopped:
            return
        view = self._view
        state = self.state
        ref = state.checkpoint
        errors: list[str] = []
        request = view.build_talker_request(
            state, self.playbook, purpose=purpose, token_budget=self.token_budget,
            on_error=errors.append,
        )
        spoke_from = request.spoke_from_version
        for detail in errors:
            self.degrade("talker_view", detail)
        notes = bool(state.pending_notes or state.refusals)
        # talker_errors="raise" and nothing said yet: a failure before the first piece must
        # leave no trace, so the notes are marked consumed only once the Talker answered.
        tentative = self.raise_errors and not reply.texts
        if notes and not tentative:
            # The view showed every note and refusal logged so far: they are consumed.
            self.emit(NoteConsumed(upto=spoke_from))
        phrases = self.never_say(ref)
        try:
            source = self.talker.speak(request)
        except Exception as exc:  # the model adapter failed before streaming: same as mid-stream
            async with aclosing(self._talker_failed(reply, exc, spoke_nothing=True)) as rec:
                async for piece in rec:
                    yield piece
            return
        stream = TalkerStream(source, view.NeverSayFilter(phrases) if phrases else None,
                              self._function_call)
        segment = Segment(kind="talker", spoke_from=spoke_from, purpose=purpose, checkpoint=ref)
        before = len(reply.texts)
        # ``say`` written out here: one generator frame less for every streamed piece.
        if reply.stopped:
            return
        reply.begin(segment)
        async with aclosing(stream.pieces()) as source:
            async for piece in source:
                if reply.stopped:
                    return  # superseded by a newer turn: it already logged what we said
                if not piece:
                    continue
                if reply.separator_due():
                    yield " "
                reply.add(piece)
                yield piece
                if tentative:
                    tentative = False
                    if notes:
                        self.emit(NoteConsumed(upto=spoke_from))
        if tentative and notes and (stream.error is None or stream.tool_calls):
            self.emit(NoteConsumed(upto=spoke_from))
        reply.finish()
        if reply.stopped:
            return  # stopped mid-segment: nothing more to judge or say
        spoke_nothing = len(reply.texts) == before
        if stream.replaced:
            self.degrade("talker", replaced_detail("talker", stream.replaced))
        if ref is not None:
            reply.talker_at.add(ref)  # rendered here, even if it said nothing
        if stream.error is not None and not (spoke_nothing and stream.tool_calls):
            async with aclosing(self._talker_failed(reply, stream.error, spoke_nothing)) as rec:
                async for piece in rec:
                    yield piece
        elif spoke_nothing and not stream.tool_calls:
            self.degrade("talker", f"empty {purpose} segment at {ref}")

    def _function_call(self, call: TalkerToolCall) -> None:
        """The Talker called a host function tool: logged (the host runs it)."""
        self.emit(FunctionCall(call_id=call.call_id, name=call.name, arguments=call.arguments))

    async def _talker_failed(self, reply: Reply, exc: Exception, spoke_nothing: bool) -> AsyncIterator[str]:
        if self.raise_errors and spoke_nothing and not reply.texts:
            # Nothing was said or logged for this attempt: the host's fallback takes over.
            raise TalkerFailed(f"the Talker failed before this reply said anything: "
                               f"{type(exc).__name__}: {exc}") from exc
        where = "before speaking" if spoke_nothing else "mid-segment"
        detail = f"{type(exc).__name__} {where}: {exc}"
        self.emit(Degraded(component="talker", detail=detail, model_failure=True))
        logger.warning("session %s: the Talker failed (%s in a row): %s", self.state.session_id,
                       self.state.model_failures.get("talker", 0), detail)
        policy = self.playbook.policies.model_failure
        if policy is not None and self.state.model_failures.get("talker", 0) >= policy.after:
            return  # policies.model_failure speaks its own line instead (TurnFlow)
        text = self.playbook.policies.recovery_line or TALKER_RECOVERY_LINE
        segment = self.canned("line", "recovery", text)
        if segment is not None:
            async with aclosing(self.line(reply, segment)) as pieces:
                async for piece in pieces:
                    yield piece

    def first_segment(self, reply: Reply, purpose: str) -> AsyncIterator[str]:
        """Speech rendered from the state as it is now: the checkpoint's unspoken verbatim, else the Talker.

        Returns the stream itself (no wrapping generator: every piece passes fewer frames).
        """
        pending = self.pending_verbatim()
        if pending is not None:
            return self.line(reply, pending)
        return self.talker_segment(reply, purpose)

    # --- the barrier ladder (hard gates) ------------------------------------------------

    async def ladder(
        self, reply: Reply, task: asyncio.Future[Any], *, barrier: float, hold: float, extended: float
    ) -> AsyncIterator[str]:
        """Wait for the decision; speak filler, hold and recovery rungs while it is not in.

        Sets ``reply.cut`` when the recovery rung ended the reply before the decision landed.
        """
        if await finished(task, barrier):
            return
        policies = self.playbook.policies
        rungs = (
            ("filler", policies.filler or FILLER_LINE, hold, f"barrier_timeout {barrier}s passed"),
            ("hold", policies.hold_line or HOLD_LINE, extended, f"hold_timeout {hold}s passed"),
        )
        for purpose, text, wait, why in rungs:
            if reply.stopped:
                return
            self.degrade("barrier", f"{why}; speaking the {purpose} line")
            segment = self.canned("filler", purpose, text)
            if segment is not None:
                async with aclosing(self.line(reply, segment)) as pieces:
                    async for piece in pieces:
                        yield piece
            if await finished(task, wait):
                return
        if reply.stopped:
            return
        self.degrade(
            "barrier",
            "decision still not in after the hold line; speaking the recovery line and ending "
            "the reply (the decision applies when it lands)",
        )
        text = policies.recovery_line or LADDER_RECOVERY_LINE
        segment = self.canned("filler", "recovery", text)
        if segment is not None:
            async with aclosing(self.line(reply, segment)) as pieces:
                async for piece in pieces:
                    yield piece
        reply.cut = True

    # --- after the decision -------------------------------------------------------------

    async def due_lines(self, reply: Reply, lines: list[Segment]) -> AsyncIterator[str]:
        """(b) exit lines and (c) verbatim lines, in the order they became due.

        ``lines`` is consumed from the front, so what a barge-in left unspoken stays in it.
        """
        while lines and not reply.stopped:
            segment = lines[0]
            async with aclosing(self.line(reply, segment)) as pieces:
                async for piece in pieces:
                    yield piece
            lines.pop(0)

    def follow_through(self, reply: Reply, *, opening: bool = False) -> AsyncIterator[str]:
        """(d): speak from the fresh state when nothing was said at the checkpoint the turn ends at.

        Nothing after a barge-in or a cut reply; at most one per reply. At a checkpoint whose
        verbatim line was not yet spoken at this entry, that line is the follow-through.
        Call it right before iterating: it decides from the state as it is now.
        """
        if reply.stopped or reply.cut or reply.followed_through:
            return one_piece("")
        state = self.state
        ref = state.checkpoint
        if ref is None or ref in reply.talker_at or ref in reply.lines_at:
            return one_piece("")
        cp = self.cps[ref]
        if state.ended and not cp.terminal:
            return one_piece("")  # ended by a policy (max_call_seconds), which spoke its own line
        reply.followed_through = True
        pending = self.pending_verbatim()
        if pending is not None:
            return self.line(reply, pending)
        purpose = "closing" if cp.terminal else ("opening" if opening else "follow_through")
        return self.talker_segment(reply, purpose)


__all__ = [
    "FILLER_LINE",
    "HOLD_LINE",
    "LADDER_RECOVERY_LINE",
    "TALKER_RECOVERY_LINE",
    "Speaker",
    "finished",
]
