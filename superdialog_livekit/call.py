"""Values a call starts with: ``call_start`` (SPEC §4.4) and ``call.*`` (SPEC §4.5).

Two sources reach a LiveKit job:

* the dispatch metadata (``ctx.job.metadata``, JSON): its ``call_start`` object carries the
  author's values, its ``call`` object may describe the line (useful on web calls and in tests);
* a SIP participant's attributes, which arrive after the job has started and always win for
  the line on a phone call.

``call_start_from_job`` validates everything at once and raises ``CallStartError`` naming every
problem; nothing is returned (so nothing can be saved) unless every value fits.
"""

from __future__ import annotations

import json
import logging
import os
import string
from collections.abc import Mapping
from typing import Any

import phonenumbers
from superdialog_core.errors import CallStartError, Problem
from superdialog_core.playbook import Playbook

logger = logging.getLogger("superdialog_livekit.call")

CALL_START_ENV = "SUPERDIALOG_CALL_START"

# The line fields a dispatch's ``call`` object may describe. ``remote_number`` is derived from
# the direction and never given; ``first_user_message``/``end_reason`` are set by the runtime.
_DISPATCH_CALL_FIELDS = (
    "session_id",
    "channel",
    "direction",
    "calling_number",
    "called_number",
    "carrier_call_id",
)
# On a phone call these come from the line; a dispatch only fills them when the line left them
# empty (a dispatch must not be able to spoof who is calling).
_LINE_FIELDS = ("channel", "direction", "calling_number", "called_number", "carrier_call_id")

# Carriers spell a withheld caller id on the keypad ("anonymous" -> 266696687). A number whose
# digits are a prefix of one of these spellings is treated as withheld. Checking only that
# direction (number is a prefix of the spelling) avoids false hits on real numbers.
_WITHHELD_WORDS = ("anonymous", "restricted", "unknown", "unavailable", "private")
_KEYPAD = {
    **dict.fromkeys("abc", "2"),
    **dict.fromkeys("def", "3"),
    **dict.fromkeys("ghi", "4"),
    **dict.fromkeys("jkl", "5"),
    **dict.fromkeys("mno", "6"),
    **dict.fromkeys("pqrs", "7"),
    **dict.fromkeys("tuv", "8"),
    **dict.fromkeys("wxyz", "9"),
}
_WITHHELD_DIGITS = tuple("".join(_KEYPAD[c] for c in word) for word in _WITHHELD_WORDS)


# ---------------------------------------------------------------------------------------------
# call_start


def _parse_object(text: str, where: str, problems: list[Problem]) -> dict[str, Any]:
    """A JSON object from ``text`` (empty means ``{}``); a problem names ``where`` otherwise."""
    if not text or not text.strip():
        return {}
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        problems.append(
            Problem(where, f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
                    hint="send a JSON object such as {\"call_start\": {...}}")
        )
        return {}
    if not isinstance(doc, dict):
        problems.append(
            Problem(where, f"must be a JSON object, not {type(doc).__name__}",
                    hint="send a JSON object such as {\"call_start\": {...}}")
        )
        return {}
    return doc


def dispatch_metadata(ctx: Any) -> dict[str, Any]:
    """The job's dispatch metadata as a dict; raises ``CallStartError`` if it is not a JSON object."""
    problems: list[Problem] = []
    doc = _parse_object(getattr(ctx.job, "metadata", "") or "", "job.metadata", problems)
    if problems:
        raise CallStartError(problems)
    return doc


def _value_context(playbook: Playbook) -> Any:
    from superdialog_core.turn.startup import anchor_time, language_of
    from superdialog_core.values.coerce import ValueContext

    return ValueContext(
        now=anchor_time(playbook, None),
        timezone=playbook.guidelines.timezone,
        phone_region=playbook.policies.phone_region,
        language=language_of(playbook),
    )


def validate_call_start(values: Mapping[str, Any], playbook: Playbook) -> dict[str, Any]:
    """Coerce ``values`` against ``playbook.call_start``; every problem is raised together.

    The engine's own check (unknown names with did-you-mean, missing required names, values
    that do not fit) runs here, before the greeting, with one addition for dispatch payloads:
    an empty string counts as missing (a backend that sends ``""`` for an unknown id).
    """
    from superdialog_core.turn.startup import check_call_start

    cleaned = {key: (None if value == "" else value) for key, value in values.items()}
    return check_call_start(playbook, cleaned, _value_context(playbook))


def call_start_from_job(ctx: Any, playbook: Playbook) -> dict[str, Any]:
    """Validated call-start values for this job (SPEC §4.4).

    Reads the ``call_start`` object of the JSON in ``ctx.job.metadata`` merged over the JSON
    object in ``$SUPERDIALOG_CALL_START`` (for local runs; the dispatch wins). Raises
    ``CallStartError`` listing every problem (malformed JSON, unknown or missing names, values
    that do not fit); returns the coerced values only when all of them fit.
    """
    problems: list[Problem] = []
    from_env = _parse_object(os.environ.get(CALL_START_ENV, ""), CALL_START_ENV, problems)
    meta = _parse_object(getattr(ctx.job, "metadata", "") or "", "job.metadata", problems)
    dispatched = meta.get("call_start", {})
    if not isinstance(dispatched, dict):
        problems.append(
            Problem("job.metadata.call_start", f"must be a JSON object, not {type(dispatched).__name__}",
                    hint="send {\"call_start\": {\"name\": value, ...}}")
        )
        dispatched = {}
    if problems:
        raise CallStartError(problems)
    merged = {**from_env, **dispatched}
    return validate_call_start(merged, playbook)


# ---------------------------------------------------------------------------------------------
# call.* values


def normalize_number(raw: Any) -> str | None:
    """An E.164 line number, or ``None`` for a withheld, empty or malformed one (never an error)."""
    if not isinstance(raw, str):
        return None
    text = raw.strip()
    for prefix in ("tel:", "sip:"):
        if text.lower().startswith(prefix):
            text = text[len(prefix):].split("@", 1)[0]
    text = text.replace(" ", "").replace("-", "")
    if text.startswith("00"):
        text = "+" + text[2:]
    if not text.startswith("+"):
        if not text.isdigit():
            return None
        text = "+" + text
    digits = text[1:]
    if not (2 <= len(digits) <= 15) or any(c not in string.digits for c in digits):
        return None
    if any(spelled.startswith(digits) for spelled in _WITHHELD_DIGITS):
        return None
    try:
        parsed = phonenumbers.parse(text, None)
    except phonenumbers.NumberParseException:
        return None
    if not phonenumbers.is_valid_number(parsed):
        return None
    return phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)


def _clean_id(raw: Any, limit: int) -> str | None:
    if not isinstance(raw, str):
        return None
    text = raw.strip()
    if not text or len(text) > limit or any(c.isspace() for c in text):
        return None
    return text


def is_sip_participant(participant: Any) -> bool:
    """True for a LiveKit SIP participant (by kind, or by its ``sip.*`` attributes)."""
    if participant is None:
        return False
    try:
        from livekit import rtc

        if getattr(participant, "kind", None) == rtc.ParticipantKind.PARTICIPANT_KIND_SIP:
            return True
    except ImportError:  # pragma: no cover - livekit is a dependency of this package
        pass
    attrs = getattr(participant, "attributes", None) or {}
    return any(str(k).startswith("sip.") for k in attrs)


def _line_values(direction: str | None, remote: str | None, local: str | None) -> dict[str, Any]:
    """Calling/called numbers from the direction: inbound remote = caller, outbound remote = callee."""
    if direction == "outbound":
        return {"calling_number": local, "called_number": remote}
    return {"calling_number": remote, "called_number": local}


def call_values_from_participant(
    participant: Any, dispatch_call: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """``call.*`` values from a participant's SIP attributes, completed by a dispatch ``call`` object.

    On a SIP participant the line wins: the dispatch only fills fields the line left empty. On a
    web call (no SIP participant) every field of the dispatch applies, so a phone caller can be
    simulated locally. ``remote_number`` is always derived from the direction.
    """
    dispatch = dict(dispatch_call or {})
    unknown = sorted(set(dispatch) - set(_DISPATCH_CALL_FIELDS) - {"remote_number"})
    if unknown:
        logger.warning(
            "dispatch 'call' object: ignoring unknown field(s) %s (known: %s)",
            ", ".join(unknown), ", ".join(_DISPATCH_CALL_FIELDS),
        )
    values: dict[str, Any] = {
        "channel": "web",
        "direction": None,
        "calling_number": None,
        "called_number": None,
        "remote_number": None,
        "carrier_call_id": None,
    }
    if is_sip_participant(participant):
        attrs: Mapping[str, str] = getattr(participant, "attributes", None) or {}
        # 1.8.9 tells inbound from outbound by sip.ruleID, which only dispatch-rule calls carry.
        direction = "inbound" if attrs.get("sip.ruleID") else "outbound"
        remote = normalize_number(attrs.get("sip.phoneNumber"))
        local = normalize_number(attrs.get("sip.trunkPhoneNumber"))
        values.update(channel="phone", direction=direction, **_line_values(direction, remote, local))
        values["carrier_call_id"] = _clean_id(attrs.get("sip.callIDFull") or attrs.get("sip.callID"), 256)
        for key in _LINE_FIELDS:
            if values.get(key) is None and key in dispatch:
                values[key] = dispatch[key]
    else:
        for key in _LINE_FIELDS:
            if key in dispatch:
                values[key] = dispatch[key]
    if dispatch.get("session_id") is not None:
        values["session_id"] = dispatch["session_id"]
    return _checked(values)


def _checked(values: dict[str, Any]) -> dict[str, Any]:
    """Normalise every field: bad numbers/ids read ``None``, never an error (logged at info)."""
    channel = values.get("channel")
    if channel not in ("phone", "web"):
        logger.info("call.channel %r is neither 'phone' nor 'web'; using 'web'", channel)
        values["channel"] = "web"
    direction = values.get("direction")
    if direction not in ("inbound", "outbound", None):
        logger.info("call.direction %r is not inbound/outbound; ignoring it", direction)
        values["direction"] = None
    for key in ("calling_number", "called_number"):
        raw = values.get(key)
        values[key] = normalize_number(raw)
        if raw is not None and values[key] is None:
            logger.info("call.%s %r is withheld or malformed; reading None", key, raw)
    values["carrier_call_id"] = _clean_id(values.get("carrier_call_id"), 256)
    if "session_id" in values:
        session_id = _clean_id(values["session_id"], 128)
        if session_id is None:
            logger.info("call.session_id %r is not a usable id; a new one is made", values["session_id"])
            del values["session_id"]
        else:
            values["session_id"] = session_id
    if values["direction"] == "outbound":
        values["remote_number"] = values["called_number"]
    elif values["direction"] == "inbound":
        values["remote_number"] = values["calling_number"]
    else:
        values["remote_number"] = None
    return values


def find_sip_participant(room: Any) -> Any | None:
    """The first SIP participant already in ``room`` (or ``None``)."""
    participants = getattr(room, "remote_participants", None) or {}
    for participant in participants.values():
        if is_sip_participant(participant):
            return participant
    return None


def call_values_from_job(ctx: Any, participant: Any | None = None) -> dict[str, Any]:
    """``call.*`` values for a job: the given (or an already joined) SIP participant + dispatch."""
    meta = dispatch_metadata(ctx)
    dispatch_call = meta.get("call")
    if dispatch_call is not None and not isinstance(dispatch_call, dict):
        logger.warning("job.metadata.call must be a JSON object; ignoring %r", dispatch_call)
        dispatch_call = None
    if participant is None:
        participant = find_sip_participant(getattr(ctx, "room", None))
    return call_values_from_participant(participant, dispatch_call)


__all__ = [
    "CALL_START_ENV",
    "CallStartError",
    "call_start_from_job",
    "call_values_from_job",
    "call_values_from_participant",
    "dispatch_metadata",
    "find_sip_participant",
    "is_sip_participant",
    "normalize_number",
    "validate_call_start",
]
