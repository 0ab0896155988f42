"""``DialogAgent``: the LiveKit ``Agent`` that wires a playbook call end to end (SPEC §10).

It speaks the opening on enter (an outbound phone call waits for the callee's first words),
ends the call once the terminal line has played, turns LiveKit's user-away state into the
playbook's silence policy (and re-arms the away timer after each prompt), corrects heard text
as soon as LiveKit reports an interrupted message, and persists the log when the session ends.
On a resumed call the opening is not replayed. ``policies.max_call_seconds`` is a hard stop: a
timer armed on enter speaks the timeout line and ends the call even if nobody says a word.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Literal

from livekit.agents import Agent
from superdialog_core.events import Utterance

from .llm import DialogMachineLLM

logger = logging.getLogger("superdialog_livekit")

EndMode = Literal["delete_room", "shutdown", "none"]
_END_MODES = ("delete_room", "shutdown", "none")


class DialogAgent(Agent):
    """An Agent whose every reply comes from ``DialogMachineLLM``.

    ``on_end``: ``"delete_room"`` (default on phone calls: hangs up SIP), ``"shutdown"`` (default
    otherwise) or ``"none"``. ``speak_first``: speak the opening on enter (default: yes, except
    on an outbound phone call). Preemptive generation is off for this agent: a speculative reply
    would run the Director on words the caller had not finished saying.
    """

    def __init__(
        self,
        llm: DialogMachineLLM | Any,
        *,
        dialog: DialogMachineLLM | None = None,
        on_end: EndMode | None = None,
        speak_first: bool | None = None,
        instructions: str = "",
        **agent_options: Any,
    ) -> None:
        dialog = _dialog_of(llm, dialog)
        if on_end is not None and on_end not in _END_MODES:
            raise ValueError(f"on_end must be one of {', '.join(_END_MODES)}, not {on_end!r}")
        turn_handling = dict(agent_options.pop("turn_handling", {}) or {})
        turn_handling["preemptive_generation"] = {
            **turn_handling.get("preemptive_generation", {}), "enabled": False,
        }
        super().__init__(instructions=instructions, llm=llm, turn_handling=turn_handling,
                         **agent_options)
        self.dialog = dialog
        if llm is not dialog:
            dialog.replies.fallback = True  # another LLM's reply to a caller turn is the fallback's
        self._on_end = on_end
        self._speak_first = speak_first
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ending = False
        self._call_timer: asyncio.TimerHandle | None = None  # policies.max_call_seconds

    # -- lifecycle --------------------------------------------------------------------------

    async def on_enter(self) -> None:
        session = self.session
        dialog = self.dialog
        dialog.replies.agent_ids.add(self.id)
        if dialog.started and dialog.replies.opened:
            # Back from another agent (a handoff round trip): its lines are logged as its
            # context by the reply below, which speaks at once (SPEC §10).
            dialog.bind_session(session)
            self._listen(session)
            session.generate_reply()
            self._arm_call_timer()
            return
        dialog.hold_turns()  # before any await: early caller words wait for the opening
        dialog.bind_session(session)
        self._listen(session)
        try:
            if await dialog.prepare():
                dialog.decide_start("resumed")  # the caller heard the opening before the failover
            elif not self._speaks_first():
                dialog.decide_start("silent")
                await dialog.start_silently()
            elif dialog.decide_start("speak"):
                session.generate_reply()  # else a waiting caller turn speaks the opening first
        except BaseException:
            dialog.decide_start("silent")  # never leave the caller's turns waiting
            raise
        self._arm_call_timer()

    def _listen(self, session: Any) -> None:
        if self._after_terminal not in self.dialog.on_ended:
            self.dialog.on_ended.append(self._after_terminal)
        session.on("user_state_changed", self._on_user_state)
        session.on("conversation_item_added", self._on_item)
        session.on("close", self._on_close)

    async def on_exit(self) -> None:
        self._cancel_call_timer()
        self.session.off("user_state_changed", self._on_user_state)
        self.session.off("conversation_item_added", self._on_item)
        self.session.off("close", self._on_close)
        if self._after_terminal in self.dialog.on_ended:
            self.dialog.on_ended.remove(self._after_terminal)

    def _call(self) -> dict[str, Any]:
        return self.dialog.call_values

    def _speaks_first(self) -> bool:
        if self._speak_first is not None:
            return self._speak_first
        call = self._call()
        return not (call.get("channel") == "phone" and call.get("direction") == "outbound")

    def end_mode(self) -> EndMode:
        """How this call ends after its terminal line."""
        if self._on_end is not None:
            return self._on_end
        return "delete_room" if self._call().get("channel") == "phone" else "shutdown"

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("DialogAgent task failed", exc_info=task.exception())

    # -- session events -----------------------------------------------------------------------

    def _on_item(self, ev: Any) -> None:
        self.dialog.observe_message(ev.item)

    def _on_user_state(self, ev: Any) -> None:
        if ev.new_state == "away" and not self._ending and not self.dialog.runtime.state.ended:
            self._spawn(self._silence())

    def _on_close(self, ev: Any) -> None:
        self._cancel_call_timer()
        self._spawn(self._persist())

    # -- policies.max_call_seconds ------------------------------------------------------------

    def _arm_call_timer(self, delay: float | None = None) -> None:
        """Arm the hard stop: it fires even when nobody speaks and no reply is running."""
        limit = self.dialog.playbook.policies.max_call_seconds
        if limit is None:
            return
        if delay is None:
            left = self.dialog.runtime.seconds_left()  # a resumed call keeps its original start
            delay = limit if left is None else left
        self._cancel_call_timer()
        self._call_timer = asyncio.get_running_loop().call_later(delay, self._call_timer_fired)

    def _cancel_call_timer(self) -> None:
        if self._call_timer is not None:
            self._call_timer.cancel()
            self._call_timer = None

    def _call_timer_fired(self) -> None:
        self._call_timer = None
        if self._ending or self.dialog.runtime.state.ended:
            return
        left = self.dialog.runtime.seconds_left()
        if left is not None and left > 0.05:  # the runtime started after the timer was armed
            self._arm_call_timer(left)
            return
        self._spawn(self._time_up())

    async def _time_up(self) -> None:
        """``max_call_seconds`` passed: the runtime logs the end (outcome ``timeout``) and its
        closing line, spoken without interruptions; then the call ends per ``on_end``."""
        dialog = self.dialog
        rt = dialog.runtime
        turn = await rt.time_up()
        dialog._publish()
        handle = None
        if turn.text:
            said = [e for e in turn.events if isinstance(e, Utterance) and e.role == "assistant"]
            handle = dialog.say_line(turn.text, said, interruptible=False)
        if rt.state.ended:
            dialog._ended(handle)  # the "ended" event, then _after_terminal ends the call

    # -- silence ------------------------------------------------------------------------------

    async def _silence(self) -> None:
        """The caller went quiet: the silence policy says what to say (or where to route)."""
        rt = self.dialog.runtime
        turn = await rt.external("silence", "user_away")
        self.dialog._publish()
        if turn.text:
            said = [e for e in turn.events if isinstance(e, Utterance) and e.role == "assistant"]
            handle = self.dialog.say_line(turn.text, said, interruptible=turn.interruptible)
            await handle
        if rt.state.ended:
            await self._end_call(None)
        else:
            # LiveKit only re-arms the away timer on a state change; after a prompt the caller
            # is still "away", so reset it to get the next prompt if the silence goes on.
            self.session.reset_away_timer()

    # -- ending the call -----------------------------------------------------------------------

    def _after_terminal(self, handle: Any) -> None:
        """The terminal line is on its way: end the call once it has played."""
        if self._ending:
            return
        self._ending = True
        self._spawn(self._end_call(handle))

    async def _end_call(self, handle: Any) -> None:
        self._ending = True
        self._cancel_call_timer()
        if handle is not None and not handle.done():
            await handle.wait_for_playout()
        await self._persist()
        mode = self.end_mode()
        logger.info("call ended (%s): %s", self.dialog.runtime.state.outcome, mode)
        if mode == "none":
            return
        if mode == "delete_room":
            try:
                from livekit.agents import get_job_context

                ctx = get_job_context()
            except RuntimeError:
                logger.warning("on_end='delete_room' outside a job; shutting the session down instead")
            else:
                await ctx.delete_room()  # hangs up the SIP participant
        self.session.shutdown(drain=True)

    async def _persist(self) -> None:
        """Wait until the runtime has handed every event to its store (and its decision landed)."""
        if self.dialog.started:
            await self.dialog.runtime.wait_idle()


def _dialog_of(llm: Any, dialog: DialogMachineLLM | None) -> DialogMachineLLM:
    """The DialogMachineLLM this agent runs: ``llm`` itself, or ``dialog`` inside a wrapper
    such as LiveKit's ``FallbackAdapter`` (found there when ``dialog`` is not given)."""
    if isinstance(llm, DialogMachineLLM):
        if dialog is not None and dialog is not llm:
            raise ValueError("dialog= names a different DialogMachineLLM than llm; pass one")
        return llm
    inner = [m for m in getattr(llm, "_llm_instances", ()) if isinstance(m, DialogMachineLLM)]
    if dialog is not None:
        if not isinstance(dialog, DialogMachineLLM):
            raise TypeError(f"dialog= must be a DialogMachineLLM, not {type(dialog).__name__}")
        if inner and dialog not in inner:
            raise ValueError(f"dialog= is not one of the LLMs inside {type(llm).__name__}")
        return dialog
    if len(inner) == 1:
        return inner[0]
    raise TypeError(
        f"DialogAgent needs a DialogMachineLLM, not {type(llm).__name__}: pass it, or wrap it "
        "(FallbackAdapter([dialog_llm, backup])) and name it with dialog=dialog_llm")


__all__ = ["DialogAgent", "EndMode"]
