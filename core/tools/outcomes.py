"""What a tool or pipeline run hands back: the ``emit`` callable's type, the refusal marker and
a pipeline's outcome. Shared by ``runner`` and ``pipelines``, so neither imports the other's
internals and the two import in one direction (runner → pipelines → outcomes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..log import events as ev

Emit = Callable[[ev.Event], ev.Event]
REFUSED = "refused: "


def is_refused(result: ev.ToolResult) -> bool:
    """Whether a failed result was refused before sending (never worth retrying)."""
    return not result.ok and (result.error or "").startswith(REFUSED)


@dataclass(frozen=True)
class PipelineOutcome:
    """How a pipeline ended: ``route`` is a checkpoint ref to advance to (or None);
    ``error_context`` (``"<pipeline>:<tool>"``) is set when a step failed with no branch or
    exhausted its retries; the runtime writes it to the ``error_context`` slot."""

    ok: bool
    route: str | None = None
    error_context: str | None = None


__all__ = ["REFUSED", "Emit", "PipelineOutcome", "is_refused"]
