"""Python tools for playbooks/dental_booking.yaml: a stand-in for the clinic's booking API.

`superdialog-livekit chat` loads ``TOOLS`` from ``<playbook>_tools.py`` next to a playbook.
In production the same tool would be the HTTP tool of ../shared/examples/dental_booking.yaml.
"""

from __future__ import annotations

import hashlib
from typing import Any


def create_visit(args: dict[str, Any], state: Any) -> dict[str, Any]:
    """Book the visit and return a booking reference derived from the confirmed details."""
    slots = {key: slot.value for key, slot in state.slots.items()}
    missing = [k for k in ("patient_name", "phone", "day", "time") if not slots.get(k)]
    if missing:
        raise ValueError(f"cannot book without {', '.join(missing)}")
    digest = hashlib.sha256(repr(sorted(slots.items())).encode()).hexdigest()
    return {"ref": str(int(digest[:8], 16) % 1_000_000).zfill(6), "start": f"{slots['day']}T{slots['time']}"}


TOOLS = {"create_visit": create_visit}
