"""Errors that reach users: each lists every problem it found, with a path and a fix."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input.

    ``path`` is dotted (``journeys.visit.checkpoints[2].advance_when[0].to``), ``message`` says
    what is wrong, ``hint`` (when there is one) says how to fix it. ``severity`` is ``error``
    or ``warning``; only errors stop a load. ``strict`` marks a warning that ``validate
    --strict`` / ``Playbook.load(path, strict=True)`` turns into an error (SPEC §2.2).
    """

    path: str
    message: str
    hint: str | None = None
    severity: str = "error"
    strict: bool = False

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}" if self.path else self.message
        if self.hint:
            text += f" ({self.hint})"
        return text


def _listing(headline: str, problems: list[Problem]) -> str:
    lines = [headline]
    lines.extend(f"  - {p}" for p in problems)
    return "\n".join(lines)


class PlaybookError(ValueError):
    """An invalid playbook. ``problems`` lists every problem (errors first), never just the first."""

    def __init__(self, problems: list[Problem], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        errors = [p for p in self.problems if p.severity == "error"]
        where = f" in {source}" if source else ""
        noun = "problem" if len(errors) == 1 else "problems"
        super().__init__(_listing(f"invalid playbook{where}: {len(errors)} {noun}", self.problems))


class ConfigError(ValueError):
    """The runtime cannot start as configured (for example unset ``${VAR}`` references)."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__(_listing("cannot start the conversation:", self.problems))


class CallStartError(ValueError):
    """Call-start values do not fit the playbook's ``call_start`` declaration; nothing was saved."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__(_listing("call-start values refused:", self.problems))


class TalkerFailed(RuntimeError):
    """The Talker failed before this reply said anything, and the runtime was asked to raise.

    ``Runtime(talker_errors="raise")``: instead of speaking the recovery line, the reply stream
    raises this, with nothing logged for the failed attempt, so a host can hand the reply to a
    fallback model. ``__cause__`` is the model's error.
    """


__all__ = ["CallStartError", "ConfigError", "PlaybookError", "Problem", "TalkerFailed"]
