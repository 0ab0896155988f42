"""Replay: re-run the Director over a logged call and diff its decisions (SPEC §12).

For each user turn the log shows decided (a ``verdict`` for that utterance, or the Director's
``degraded`` failure), the state is folded from the log up to and including the caller's
utterance, so every turn is judged on the state the call really had, whatever the replayed
Director decided on earlier turns. The Director request is rebuilt from that state and the
playbook given, the Director is asked as the runtime asks it (``director_timeout``, one retry
with the error for unparseable output), and the verdict is applied with the engine's own
``apply_verdict`` onto a scratch copy of the log. What the decision changed (slots written,
slots cleared, values refused, the advance taken or blocked) is compared with what the log
recorded for that turn; Director notes and ``degraded`` findings are shown, not compared.

Nothing here reads a clock or a random source: the same log, playbook and a deterministic
Director give the same report, and ``ReplayReport.to_dict()`` is plain, sorted data.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..log import events as ev
from ..log.eventlog import EventLog
from ..log.state import ConversationState
from ..roles.asking import ask_director
from .startup import cached_playbook_hash, phone_region

if TYPE_CHECKING:
    from ..format.playbook import Playbook
    from ..roles.models import DirectorModel

COMPARED: tuple[str, ...] = ("slots", "cleared", "refused", "advance", "blocked")
SHOWN: tuple[str, ...] = ("notes", "degraded")
_DECISION_TYPES = (ev.SlotWrite, ev.SlotClear, ev.SlotRefused, ev.Advance, ev.SteeringNote,
                   ev.Degraded)


@dataclass
class Decision:
    """What one Director decision changed (or, for ``error``, why there is none)."""

    slots: dict[str, dict[str, Any]] = field(default_factory=dict)
    cleared: dict[str, str] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    advance: dict[str, Any] | None = None
    blocked: str | None = None
    notes: list[str] = field(default_factory=list)
    degraded: list[str] = field(default_factory=list)
    verdict: dict[str, Any] | None = None  # the verdict as applied; None: the Director failed
    error: str | None = None  # the turn could not be replayed (e.g. a checkpoint gone)

    def compared(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in COMPARED}

    def to_dict(self) -> dict[str, Any]:
        return {
            "slots": self.slots, "cleared": self.cleared, "refused": self.refused,
            "advance": self.advance, "blocked": self.blocked, "notes": self.notes,
            "degraded": self.degraded, "verdict": self.verdict, "error": self.error,
        }


@dataclass
class TurnReplay:
    """One user turn: where it was, what the caller said, the logged and replayed decisions."""

    index: int
    user_version: int
    checkpoint: str | None
    text: str
    logged: Decision
    replayed: Decision

    @property
    def drift(self) -> list[str]:
        """The compared aspects that differ (``error`` when the turn could not be replayed)."""
        if self.replayed.error is not None:
            return ["error"]
        logged, replayed = self.logged.compared(), self.replayed.compared()
        return [name for name in COMPARED if _canon(logged[name]) != _canon(replayed[name])]

    def to_dict(self) -> dict[str, Any]:
        return {
            "turn": self.index, "user_version": self.user_version,
            "checkpoint": self.checkpoint, "text": self.text, "drift": self.drift,
            "logged": self.logged.to_dict(), "replayed": self.replayed.to_dict(),
        }


@dataclass
class ReplayReport:
    """Every replayed turn, the playbook hashes, and the turns the log shows undecided."""

    session_id: str | None
    log_hash: str | None
    playbook_hash: str
    turns: list[TurnReplay]
    skipped: list[dict[str, Any]] = field(default_factory=list)

    @property
    def same_playbook(self) -> bool:
        """The log was written by this very playbook (its hash is in ``session_start``)."""
        return self.log_hash == self.playbook_hash

    @property
    def drifted(self) -> list[TurnReplay]:
        return [turn for turn in self.turns if turn.drift]

    @property
    def has_drift(self) -> bool:
        return bool(self.drifted)

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "playbook": {"log_hash": self.log_hash, "hash": self.playbook_hash,
                         "same": self.same_playbook},
            "turns": [turn.to_dict() for turn in self.turns],
            "skipped": self.skipped,
            "drift": self.has_drift,
            "drifted_turns": [turn.index for turn in self.drifted],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=2, ensure_ascii=False,
                          default=str) + "\n"


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


# --- the logged decisions -----------------------------------------------------------------


def _summarise(events: Sequence[ev.Event], verdict: dict[str, Any] | None) -> Decision:
    out = Decision(verdict=verdict)
    advanced = False
    for event in events:
        if isinstance(event, ev.SlotWrite):
            out.slots[event.key] = {"value": event.value, "status": event.status, "by": event.by}
            out.cleared.pop(event.key, None)
        elif isinstance(event, ev.SlotClear):
            out.cleared[event.key] = event.reason
            out.slots.pop(event.key, None)
        elif isinstance(event, ev.SlotRefused):
            out.refused[event.key] = event.message
        elif isinstance(event, ev.Advance):
            out.advance = {"to": event.to, "by": event.by, "rule_id": event.rule_id}
            advanced = True
        elif isinstance(event, ev.SteeringNote):
            out.notes.append(event.text)
        elif isinstance(event, ev.Degraded):
            out.degraded.append(event.detail)
    target = (verdict or {}).get("advance")
    if target and not advanced:
        out.blocked = str(target)  # asked for and applied, but its requires were not met
    return out


def _is_decision_event(event: ev.Event) -> bool:
    if isinstance(event, ev.Degraded):
        return event.component == "director"
    return isinstance(event, _DECISION_TYPES)


def logged_decisions(log: EventLog) -> tuple[dict[int, Decision], list[dict[str, Any]]]:
    """The decision the log records for each decided user utterance, by its version.

    With a verdict: the decision events between the utterance and its ``verdict`` event (the
    verdict is applied in one go, so nothing else writes slots or advances in between). Without
    one (the Director failed): its ``degraded`` events and a goodbye routed without a verdict.
    Undecided utterances (after the end, past the time limit) are returned as skipped.
    """
    events = list(log)
    users = [e for e in events if isinstance(e, ev.Utterance) and e.role == "user"]
    verdicts: dict[int, ev.Verdict] = {}
    last_user: int | None = None
    for e in events:
        if isinstance(e, ev.Utterance) and e.role == "user":
            last_user = e.version
        elif isinstance(e, ev.Verdict):
            # A log written before verdicts named their utterance: the latest one before it.
            owner = e.user_version if e.user_version is not None else last_user
            if owner is not None:
                verdicts.setdefault(owner, e)
    bounds = {u.version: (users[i + 1].version if i + 1 < len(users) else len(events) + 1)
              for i, u in enumerate(users)}
    decided: dict[int, Decision] = {}
    skipped: list[dict[str, Any]] = []
    for user in users:
        end = bounds[user.version]
        verdict = verdicts.get(user.version)
        if verdict is not None:
            between = [e for e in events[user.version:verdict.version - 1] if _is_decision_event(e)]
            decided[user.version] = _summarise(between, dict(verdict.verdict))
            continue
        window = events[user.version:end - 1]
        failures = [e for e in window if isinstance(e, ev.Degraded) and e.component == "director"]
        if not failures:
            reason = "after the call ended" if any(
                isinstance(e, ev.SessionEnd) and e.version < user.version for e in events
            ) else "no Director decision in the log"
            skipped.append({"user_version": user.version, "text": user.text, "reason": reason})
            continue
        picked: list[ev.Event] = []
        for e in window:
            if isinstance(e, ev.Advance):
                if e.by == "interrupt":
                    picked.append(e)  # the goodbye that routes without a verdict
                break  # anything later is quiescence, not the Director's decision
            if isinstance(e, ev.Degraded) and e.component == "director":
                picked.append(e)
        decided[user.version] = _summarise(picked, None)
    return decided, skipped


# --- asking the Director again ------------------------------------------------------------


async def replay_turn(log: EventLog, playbook: Playbook, director: DirectorModel,
                      user_version: int, *, director_timeout: float = 8.0) -> Decision:
    """Fold ``log`` up to the utterance at ``user_version``, ask ``director``, apply, summarise."""
    from ..format.lookups import language_of
    from ..roles import director as prompting
    from ..roles.goodbye import is_clear_goodbye
    from ..values.context import ValueContext

    user = log.get(user_version)
    if not isinstance(user, ev.Utterance) or user.role != "user":
        raise ValueError(f"version {user_version} of the log is not a caller utterance")
    prefix = log[:user_version]
    scratch = EventLog(prefix, clock=lambda: user.at)
    state = ConversationState.fold(prefix, playbook)
    if state.anchor is None:
        return Decision(error="the log has no session_start before this turn")
    try:
        value_ctx = ValueContext(now=state.anchor, timezone=state.timezone,
                                 phone_region=phone_region(playbook, state.call),
                                 language=language_of(playbook))
        request = prompting.build_director_request(state, playbook, user_text=user.text,
                                                   user_version=user_version)
    except (ValueError, KeyError) as exc:
        return Decision(error=str(exc))
    emitted: list[ev.Event] = []

    def emit(event: ev.Event) -> ev.Event:
        scratch.append(event)
        state.apply(event)
        emitted.append(event)
        return event

    def degrade(detail: str) -> None:
        emit(ev.Degraded(component="director", detail=detail))

    verdict, attempts = await ask_director(
        director, request, timeout=director_timeout, cap=playbook.policies.caps.verdict_bytes,
        finding=degrade, failure=degrade)
    applied: dict[str, Any] | None = None
    if verdict is not None:
        result = prompting.apply_verdict(
            verdict, state=state, playbook=playbook, value_ctx=value_ctx, user_text=user.text,
            user_version=user_version, emit=emit, attempts=attempts)
        applied = dict(result.verdict)
    else:
        # The runtime's goodbye without a verdict (turnflow.TurnFlow._goodbye_without_verdict).
        spec = next((i for i in playbook.interrupts if i.kind == "goodbye"), None)
        if spec is not None and spec.to != state.checkpoint and is_clear_goodbye(
                user.text, playbook.policies.goodbye_words):
            emit(ev.Advance(from_=state.checkpoint, to=spec.to,
                            rule_id=f"interrupt:{spec.id}", by="interrupt"))
    return _summarise([e for e in emitted if _is_decision_event(e)], applied)


async def replay(log: EventLog, playbook: Playbook, director: DirectorModel, *,
                 director_timeout: float = 8.0) -> ReplayReport:
    """Replay every decided user turn of ``log`` against ``playbook`` with ``director``.

    Turns are asked in log order, one Director call (or two, on a retry) each, so a scripted
    Director plays its verdicts in the order the call used them.
    """
    start = next((e for e in log if isinstance(e, ev.SessionStart)), None)
    logged, skipped = logged_decisions(log)
    turns: list[TurnReplay] = []
    for index, (version, decision) in enumerate(sorted(logged.items()), start=1):
        before = ConversationState.fold(log[:version - 1], playbook)
        user = log.get(version)
        assert isinstance(user, ev.Utterance)
        replayed = await replay_turn(log, playbook, director, version,
                                     director_timeout=director_timeout)
        turns.append(TurnReplay(index=index, user_version=version, checkpoint=before.checkpoint,
                                text=user.text, logged=decision, replayed=replayed))
    return ReplayReport(
        session_id=start.session_id if start else None,
        log_hash=start.playbook_hash if start else None,
        playbook_hash=cached_playbook_hash(playbook),
        turns=turns, skipped=skipped,
    )


# --- the text form ------------------------------------------------------------------------


def describe(decision: Decision) -> list[tuple[str, str]]:
    """(aspect, line) pairs for one decision, in a fixed order.

    The aspect is the compared field, with the slot for per-slot rows (``slots.party_size``),
    so two sides line up row by row.
    """
    if decision.error is not None:
        return [("error", f"cannot replay: {decision.error}")]
    rows: list[tuple[str, str]] = []
    if decision.verdict is None:
        rows.append(("verdict", "no verdict (the Director failed)"))
    for key in sorted(decision.slots):
        slot = decision.slots[key]
        by = "" if slot["by"] == "director" else f", by {slot['by']}"
        value = json.dumps(slot["value"], ensure_ascii=False, default=str)
        rows.append((f"slots.{key}", f"slot {key} = {value} ({slot['status']}{by})"))
    for key in sorted(decision.cleared):
        rows.append((f"cleared.{key}", f"cleared {key} ({decision.cleared[key]})"))
    for key in sorted(decision.refused):
        message = decision.refused[key]
        message = message[len(key) + 2:] if message.startswith(f"{key}: ") else message
        rows.append((f"refused.{key}", f"refused {key}: {message}"))
    if decision.advance is not None:
        adv = decision.advance
        rows.append(("advance", f"→ {adv['to']} ({adv['rule_id']}, by {adv['by']})"))
    if decision.blocked is not None:
        rows.append(("blocked", f"advance to {decision.blocked} blocked (requires not met)"))
    for note in decision.notes:
        rows.append(("notes", f"note: {note}"))
    for detail in decision.degraded:
        rows.append(("degraded", f"degraded: {detail}"))
    if not rows:
        rows.append(("none", "no change"))
    return rows


def side_by_side(turn: TurnReplay, width: int = 60) -> list[str]:
    """The logged and replayed decisions of a turn in two columns; ``≠`` marks a drifted row.

    Cells longer than ``width`` are cut with ``…`` (the JSON report keeps them whole).
    """
    logged, replayed = describe(turn.logged), describe(turn.replayed)
    aspects: list[str] = []
    for aspect, _ in [*logged, *replayed]:
        if aspect not in aspects:
            aspects.append(aspect)
    drift = set(turn.drift)
    rows: list[tuple[str, str, str]] = []
    for aspect in aspects:
        left = [text for a, text in logged if a == aspect]
        right = [text for a, text in replayed if a == aspect]
        drifted = aspect.split(".", 1)[0] in drift
        for i in range(max(len(left), len(right))):
            a = left[i] if i < len(left) else ""
            b = right[i] if i < len(right) else ""
            rows.append(("≠" if drifted and a != b else " ", _cut(a, width), _cut(b, width)))
    col = max([len("logged"), *(len(r[1]) for r in rows)])
    lines = [f"    {'logged':<{col}} | replayed"]
    lines += [f"  {mark} {a:<{col}} | {b}".rstrip() for mark, a, b in rows]
    return lines


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def report_lines(report: ReplayReport, *, log: str, playbook: str, director: str) -> list[str]:
    """The text form of a replay: a header, each turn side by side, the result."""
    lines = [f"replay of {log} (session {report.session_id}) against {playbook}",
             f"director: {director}"]
    if report.log_hash is None:
        lines.append("note: the log has no session_start, so its playbook version is unknown")
    elif not report.same_playbook:
        lines.append(f"note: the log was written by an older or other version of this playbook "
                     f"(hash {report.log_hash} in the log, {report.playbook_hash} now); drift may "
                     "come from the playbook as well as from the Director")
    else:
        lines.append(f"playbook: the version the log was written with (hash {report.playbook_hash})")
    for turn in report.turns:
        status = f"DRIFT ({', '.join(turn.drift)})" if turn.drift else "same"
        text = json.dumps(turn.text, ensure_ascii=False)
        lines += ["", f"turn {turn.index} (v{turn.user_version}) at {turn.checkpoint}: "
                      f"caller {text}  {status}", *side_by_side(turn)]
    for item in report.skipped:
        text = json.dumps(item["text"], ensure_ascii=False)
        lines += ["", f"skipped v{item['user_version']}: caller {text} ({item['reason']})"]
    lines.append("")
    drifted = report.drifted
    if drifted:
        names = ", ".join(f"turn {t.index} (v{t.user_version})" for t in drifted)
        lines.append(f"drift in {len(drifted)} of {len(report.turns)} turns: {names}")
    else:
        lines.append(f"no drift in {len(report.turns)} turns")
    return lines


__all__ = [
    "COMPARED",
    "Decision",
    "ReplayReport",
    "TurnReplay",
    "describe",
    "logged_decisions",
    "replay",
    "replay_turn",
    "report_lines",
    "side_by_side",
]
