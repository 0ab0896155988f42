"""Moving between checkpoints until the conversation is quiet (SPEC §6.4).

After the Director's verdict, the entered checkpoint's pipeline runs (once per entry),
``judge: expr`` rules evaluate, ``auto`` checkpoints speak and advance, and terminal
checkpoints end the session with their outcome; at most ``MAX_HOPS`` hops, then a
``degraded`` event. Every advance, whoever emitted it, is *entered* here: the exit line of the
checkpoint left (for Director and expr rules), the verbatim line of the one entered, its
``on_enter`` tools, and ``session_end`` for a terminal one. Lines are only collected as due
(``Segment``s); the runtime speaks and logs them, so the log never claims unspoken speech.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..format import lookups
from ..format.playbook import Checkpoint, Playbook
from ..log.events import Advance, Degraded, Event, SessionEnd, SlotWrite
from ..log.slots import plan_write, requires_status
from ..roles.talker import view_values
from .speech import Segment

MAX_HOPS = 8
_EXIT_LINE_BY = ("director", "expr")  # SPEC §6.5 (b): only rule-driven exits speak exit_say


class Progress:
    """Enters advances and settles the conversation; collects the lines that became due.

    One instance per runtime. ``observe`` is fed every emitted event (by the runtime's emit);
    ``enter_pending`` handles the advances seen since the last call, in order.
    """

    def __init__(
        self,
        playbook: Playbook,
        state: Any,
        emit: Callable[[Event], Event],
        runner: Any,
        env: dict[str, Any],
    ) -> None:
        self.playbook = playbook
        self.state = state
        self.emit = emit
        self.runner = runner
        self.env = env
        self.lines: list[Segment] = []
        # ref -> Checkpoint, looked up once: a pydantic private attribute costs ~10 µs a read
        self.cps = playbook.checkpoints
        self._advances: list[Advance] = []

    # --- bookkeeping --------------------------------------------------------------------

    def observe(self, event: Event) -> None:
        if isinstance(event, Advance):
            self._advances.append(event)

    def take_lines(self) -> list[Segment]:
        lines, self.lines = self.lines, []
        return lines

    def degrade(self, component: str, detail: str) -> None:
        self.emit(Degraded(component=component, detail=detail))

    def advance(self, to: str, *, rule_id: str, by: str) -> None:
        self.emit(Advance(from_=self.state.checkpoint, to=to, rule_id=rule_id, by=by))  # type: ignore[arg-type]

    # --- rendering ----------------------------------------------------------------------

    def render(self, template: Any, where: str) -> str:
        """A speech template's text; a failing part renders empty and is logged once."""
        if template is None:
            return ""
        scope = self.state.scope()
        if "views" in template.roots and lookups.views(self.playbook):
            # Views render in every spoken line, as in guidance (SPEC §2.2).
            scope = {**scope, "views": view_values(
                self.playbook, scope, lambda detail: self.degrade("view", f"{where}: {detail}"))}
        text, error = template.render(scope)
        if error:
            self.degrade("template", f"{where}: {error}")
        return (text or "").strip()

    def verbatim_line(self, ref: str, entry_version: int) -> Segment | None:
        """The say_verbatim of ``ref`` for one entry, rendered now (None if it has none)."""
        cp = self.cps[ref]
        if cp.say_verbatim is None:
            return None
        text = self.render(cp._say_verbatim, f"{ref}.say_verbatim")
        if not text:
            return None
        return Segment(
            kind="verbatim",
            spoke_from=self.state.version,
            text=text,
            purpose="say_verbatim",
            checkpoint=ref,
            entry_version=entry_version,
            interruptible=cp.interruptible,
        )

    # --- entering -----------------------------------------------------------------------

    async def enter_pending(self) -> None:
        """Enter every advance observed since the last call (exit line, verbatim, on_enter, end)."""
        while self._advances:
            advance = self._advances.pop(0)
            await self._enter(advance)

    async def _enter(self, advance: Advance) -> None:
        if advance.from_ and advance.by in _EXIT_LINE_BY:
            left = self.cps.get(advance.from_)
            if left is not None and left.exit_say:
                text = self.render(left._exit_say, f"{advance.from_}.exit_say")
                if text:
                    self.lines.append(
                        Segment(
                            kind="verbatim",
                            spoke_from=self.state.version,
                            text=text,
                            purpose="exit_say",
                            checkpoint=advance.from_,
                        )
                    )
        ref = advance.to
        cp = self.cps[ref]
        line = self.verbatim_line(ref, advance.version)
        if line is not None:
            self.lines.append(line)
        hard = cp.gate == "hard"
        for tool_id in cp.on_enter:
            if self.state.ended or self.state.checkpoint != ref:
                break
            await self.runner.run_tool(tool_id, state=self.state, emit=self.emit, hard_gate=hard)
        if cp.terminal and not self.state.ended and self.state.checkpoint == ref:
            self.emit(SessionEnd(outcome=cp.outcome, reason=f"terminal:{ref}"))

    # --- settling -----------------------------------------------------------------------

    def pipeline_scope(self, cp: Checkpoint) -> dict[str, Any] | None:
        """``pipeline.ok``/``failed`` of this entry's run (None before it ran)."""
        if not cp.pipeline:
            return None
        state = self.state
        ran = state.last_pipeline_version
        if ran is None or ran < state.checkpoint_entered_version:
            return None
        result = state.results.get("pipeline")
        ok = bool(result.ok) if result is not None else False
        return {"ok": ok, "failed": not ok}

    async def settle(self) -> None:
        """Enter pending advances, then hop until quiet (SPEC §6.4)."""
        await self.enter_pending()
        hops = 0
        while not self.state.ended and self.state.checkpoint is not None:
            if not await self._hop():
                return
            await self.enter_pending()
            hops += 1
            if hops >= MAX_HOPS and not self.state.ended:
                self.degrade(
                    "quiescence",
                    f"stopped after {MAX_HOPS} hops at {self.state.checkpoint}: "
                    "check for a loop of expr/auto rules",
                )
                return

    async def _hop(self) -> bool:
        """One step of quiescence; True when it advanced."""
        state = self.state
        ref = state.checkpoint
        cp = self.cps[ref]
        failed_pipeline = False
        if cp.pipeline and self.pipeline_scope(cp) is None:
            outcome = await self.runner.run_pipeline(
                cp.pipeline, state=state, emit=self.emit, hard_gate=cp.gate == "hard"
            )
            self._write_error_context(outcome)
            if state.ended or state.checkpoint != ref:
                return True
            if outcome.route:
                self.advance(outcome.route, rule_id="pipeline", by="pipeline")
                return True
            failed_pipeline = not outcome.ok
        if self._expr_rules(cp, ref):
            return True
        if failed_pipeline and cp.on_failure:
            self.advance(cp.on_failure, rule_id="on_failure", by="pipeline")
            return True
        if cp.auto and cp.advance_when:
            self.advance(cp.advance_when[0].to, rule_id="auto", by="policy")
            return True
        return False

    def _write_error_context(self, outcome: Any) -> None:
        error_context = getattr(outcome, "error_context", None)
        if not error_context:
            return
        current = self.state.slots.get("error_context")
        if current is not None and current.value == error_context:
            return  # the pipeline runner wrote it already (or it is unchanged)
        self.emit(SlotWrite(key="error_context", value=error_context, status="confirmed", by="tool"))

    def _expr_rules(self, cp: Checkpoint, ref: str) -> bool:
        rules = [rule for rule in cp.advance_when if rule.judge == "expr"]
        if not rules:
            return False
        scope = self.state.scope(env=self.env, pipeline=self.pipeline_scope(cp))
        for rule in rules:
            compiled = rule._expr
            if compiled is None:
                continue
            errors: list[str] = []
            if not compiled.evaluate(scope, on_error=errors.append):
                self._expr_errors(rule.id, errors)
                continue
            self._expr_errors(rule.id, errors)
            missing, unconfirmed = requires_status(self.state, self.playbook, rule, ref)
            if missing or unconfirmed:
                continue
            for key, value in rule.set_.items():  # a null value clears the slot
                for event in plan_write(self.state, self.playbook, key, value, "rule"):
                    self.emit(event)
            self.advance(rule.to, rule_id=rule.id or f"{ref}.expr", by="expr")
            return True
        return False

    def _expr_errors(self, rule_id: str | None, errors: list[str]) -> None:
        if errors:
            self.degrade("expr", f"{rule_id}: {errors[0]}")


__all__ = ["MAX_HOPS", "Progress"]
