"""The records the fold builds: a filled slot, a stored tool result, a transcript entry.

Plain dataclasses with no behaviour beyond reading themselves; ``state.py`` (which re-exports
them) keeps them in ``ConversationState.slots``, ``.results`` and ``.transcript``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import events as ev


@dataclass(frozen=True, slots=True)
class SlotState:
    """A filled slot: its value (JSON-native), status, who wrote it and at which version."""

    value: Any
    status: ev.SlotStatus
    by: ev.WrittenBy
    version: int


@dataclass(frozen=True, slots=True)
class ResultState:
    """A stored tool result (``store_as`` / ``store_response_as``), as expressions read it."""

    tool: str
    ok: bool
    status: int | None
    data: Any
    error: str | None
    version: int


@dataclass(slots=True)
class TranscriptEntry:
    """One utterance as the conversation knows it.

    ``heard_text`` is what the caller actually heard (``text`` unless a speech_correction cut
    it); ``superseded`` marks a user utterance LiveKit replaced with a later one.
    """

    version: int
    role: ev.Role
    text: str
    heard_text: str
    spoke_from_version: int | None = None
    interrupted: bool = False
    filler: bool = False
    kind: str | None = None
    purpose: str | None = None
    superseded: bool = False
    message_id: str | None = None
    agent: str | None = None  # handled by another agent / a fallback LLM (Utterance.agent)

    @property
    def fully_heard(self) -> bool:
        """The caller heard all of it (nothing cut it short)."""
        return not self.interrupted and self.heard_text == self.text


__all__ = ["ResultState", "SlotState", "TranscriptEntry"]
