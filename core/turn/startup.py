"""What a conversation needs before its first event: env, call-start values, call values, time.

Everything here runs once per call at ``Runtime`` construction and raises a ``ConfigError`` or
``CallStartError`` that lists every problem at once, so a misconfigured call fails before the
caller hears anything (SPEC §2.2, §4.4, §4.5, §13). Also once-per-playbook or once-per-process
work the runtime needs at start: the playbook digest and the value parsers' warm-up.
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import logging
import os
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..errors import CallStartError, ConfigError, Problem
from ..format.lookups import language_of
from ..format.playbook import ENV_REF, Playbook
from ..values.coerce import ValueRefused, coerce, phone_region_of, warm_up

logger = logging.getLogger("superdialog_core.runtime")

# The call.* names of SPEC §4.5; anything else in ``call`` is a typo worth reporting.
CALL_KEYS = (
    "session_id",
    "channel",
    "direction",
    "calling_number",
    "called_number",
    "remote_number",
    "carrier_call_id",
    "first_user_message",
    "end_reason",
)


def _did_you_mean(name: str, choices: list[str]) -> str | None:
    close = difflib.get_close_matches(name, choices, n=1)
    return f"did you mean {close[0]!r}?" if close else None


def resolve_env(playbook: Playbook, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The playbook's env with every ``${VAR}`` replaced from the process environment.

    Raises ``ConfigError`` naming every unset variable (and the env keys that use it), so an
    operator fixes them all in one go instead of one restart per missing secret.
    """
    source = os.environ if environ is None else environ
    problems: list[Problem] = []
    missing: set[str] = set()
    resolved: dict[str, str] = {}
    for key, value in playbook.env.items():
        for var in ENV_REF.findall(value):
            if var not in source and var not in missing:
                missing.add(var)
                users = ", ".join(playbook.env_references().get(var, [key]))
                problems.append(
                    Problem(
                        path=f"env.{key}",
                        message=f"environment variable {var} is not set (used by env {users})",
                        hint=f"export {var}=... before starting the call",
                    )
                )
        resolved[key] = ENV_REF.sub(lambda m: source.get(m.group(1), ""), value)
    if problems:
        raise ConfigError(problems)
    return resolved


def check_call_values(call: Mapping[str, Any] | None, session_id: str) -> dict[str, Any]:
    """The call.* namespace: every known name present (None when unknown), session id filled in."""
    values: dict[str, Any] = dict.fromkeys(CALL_KEYS)
    problems: list[Problem] = []
    for key, value in (call or {}).items():
        if key not in CALL_KEYS:
            problems.append(
                Problem(
                    path=f"call.{key}",
                    message=f"unknown call value {key!r}",
                    hint=_did_you_mean(key, list(CALL_KEYS))
                    or f"call values are: {', '.join(CALL_KEYS)}",
                )
            )
            continue
        values[key] = value
    if problems:
        raise ConfigError(problems)
    values["session_id"] = session_id
    return values


def check_call_start(
    playbook: Playbook, values: Mapping[str, Any] | None, value_ctx: Any
) -> dict[str, Any]:
    """Coerce call-start values against ``playbook.call_start``.

    Returns the coerced values (JSON-native). Raises ``CallStartError`` listing every unknown
    name, every missing required name and every value that does not fit; nothing is written
    unless all of them are right (SPEC §4.4).
    """

    declared = playbook.call_start
    given = dict(values or {})
    problems: list[Problem] = []
    coerced: dict[str, Any] = {}
    for name, raw in given.items():
        spec = declared.get(name)
        if spec is None:
            hint = _did_you_mean(name, list(declared))
            if hint is None:
                hint = (
                    f"the playbook declares: {', '.join(declared)}"
                    if declared
                    else "the playbook declares no call_start values; add a call_start: section"
                )
            problems.append(
                Problem(path=f"call_start.{name}", message=f"unknown call-start value {name!r}", hint=hint)
            )
            continue
        if raw is None and not spec.required:
            continue
        try:
            coerced[name] = coerce(name, spec, raw, value_ctx)
        except ValueRefused as exc:
            problems.append(
                Problem(
                    path=f"call_start.{name}",
                    message=f"value {raw!r} does not fit type {spec.type}: {exc.message}",
                    hint=f"pass a valid {spec.type}",
                )
            )
    for name, spec in declared.items():
        if given.get(name) is None and spec.default is not None:
            try:  # a default that does not fit is a load error already; this is belt and braces
                coerced[name] = coerce(name, spec, spec.default, value_ctx)
            except ValueRefused as exc:
                problems.append(Problem(path=f"call_start.{name}",
                                        message=f"default {spec.default!r} does not fit type {spec.type}: {exc.message}",
                                        hint="fix the playbook's call_start default"))
            continue
        if spec.required and given.get(name) is None:
            problems.append(
                Problem(
                    path=f"call_start.{name}",
                    message=f"required call-start value {name!r} is missing",
                    hint="set it in the dispatch metadata's call_start object",
                )
            )
    if problems:
        raise CallStartError(problems)
    return coerced


def zone_of(playbook: Playbook) -> ZoneInfo | timezone:
    """The playbook's ``guidelines.timezone``; ConfigError when the name is not a real zone."""
    name = playbook.guidelines.timezone
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ConfigError(
            [
                Problem(
                    path="guidelines.timezone",
                    message=f"unknown timezone {name!r}",
                    hint="use an IANA name such as Europe/Berlin or UTC",
                )
            ]
        ) from exc


def anchor_time(playbook: Playbook, now: datetime | None) -> datetime:
    """The call's time anchor: ``now`` (must be timezone-aware) or the current time in the zone."""
    zone = zone_of(playbook)
    if now is None:
        return datetime.now(zone)
    if now.tzinfo is None or now.utcoffset() is None:
        raise ConfigError(
            [
                Problem(
                    path="now",
                    message="now must be a timezone-aware datetime",
                    hint="pass datetime(..., tzinfo=ZoneInfo('Europe/Berlin'))",
                )
            ]
        )
    return now


def phone_region(playbook: Playbook, call: Mapping[str, Any]) -> str | None:
    """``policies.phone_region``, else the region of the caller's own number (SPEC §4.1)."""
    if playbook.policies.phone_region:
        return playbook.policies.phone_region
    number = call.get("calling_number") or call.get("remote_number")
    if not isinstance(number, str) or not number.startswith("+"):
        return None  # a withheld or malformed number reads as "no region", never an error
    return phone_region_of(number)


def playbook_hash(playbook: Playbook) -> str:
    """A stable digest of the playbook document, recorded in ``session_start`` for replay."""
    text = playbook.model_dump_json(by_alias=True, exclude_none=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def check_options(
    director: Any, talker: Any, barrier_timeout: float, hold_timeout: float | None,
    director_timeout: float, token_budget: int,
) -> list[Problem]:
    """Problems with the Runtime's models and options (empty when all is well)."""
    problems: list[Problem] = []
    if not callable(getattr(director, "decide", None)):
        problems.append(Problem("director", "the director has no decide(request) method",
                                "pass a DirectorModel, e.g. ScriptedDirector or a plugin adapter"))
    if not callable(getattr(talker, "speak", None)):
        problems.append(Problem("talker", "the talker has no speak(request) method",
                                "pass a TalkerModel, e.g. ScriptedTalker or a plugin adapter"))
    if barrier_timeout < 0:
        problems.append(Problem("barrier_timeout", f"must be >= 0 seconds, got {barrier_timeout}"))
    if hold_timeout is not None and hold_timeout <= 0:
        problems.append(Problem("hold_timeout", f"must be > 0 seconds, got {hold_timeout}",
                                "or None for policies.hold_timeout"))
    if director_timeout <= 0:
        problems.append(Problem("director_timeout", f"must be > 0 seconds, got {director_timeout}"))
    if token_budget < 1:
        problems.append(Problem("token_budget", f"must be at least 1, got {token_budget}"))
    return problems


def check_python_tools(playbook: Playbook, python_tools: Mapping[str, Any] | None) -> None:
    """Refuse a playbook whose ``type: python`` tools have no implementation (``ConfigError``).

    One problem per missing tool, each saying where the tools were looked for: a
    ``PythonTools`` (``tools.discovery``) knows every place searched; a plain mapping was given
    as ``python_tools=``. A call that cannot finish never starts.
    """
    from ..tools.discovery import ENV_VAR, PythonTools

    given = python_tools or {}
    missing = [(i, t.id) for i, t in enumerate(playbook.tools)
               if t.type == "python" and t.id not in given]
    if not missing:
        return
    if isinstance(python_tools, PythonTools):
        searched = list(python_tools.searched)
    elif python_tools:
        searched = [f"python_tools= (given: {', '.join(sorted(given))})"]
    else:
        searched = ["python_tools= (not given)"]
    where = "looked in " + "; ".join(searched)
    fix = (f"register it by id: python_tools={{...}}, chat --tools FILE, ${ENV_VAR}=module:attr, "
           "or TOOLS = {...} in <playbook>_tools.py next to the playbook")
    raise ConfigError([
        Problem(f"tools[{index}]", f"python tool {tool_id!r} has no implementation ({where})", fix)
        for index, tool_id in missing
    ])


_HASHES: dict[int, tuple[Playbook, str]] = {}


def cached_playbook_hash(playbook: Playbook) -> str:
    """The playbook's digest, computed once per loaded playbook (shared by every call)."""
    cached = _HASHES.get(id(playbook))
    if cached is None or cached[0] is not playbook:
        if len(_HASHES) > 64:
            _HASHES.clear()
        cached = (playbook, playbook_hash(playbook))
        _HASHES[id(playbook)] = cached
    return cached[1]


_WARMED = False


def warm_values_once(playbook: Playbook) -> None:
    """Pay dateparser's slow first call in a thread once per process, if dates can be said."""
    global _WARMED
    if _WARMED:
        return
    types = {spec.type for cp in playbook.checkpoints.values() for spec in cp.slots.values()}
    if not types & {"date", "time", "datetime"}:
        return
    _WARMED = True
    future = asyncio.get_running_loop().run_in_executor(None, warm_up, language_of(playbook))
    future.add_done_callback(_report_warm_up)


def _report_warm_up(future: asyncio.Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        logger.warning("warming the value parsers failed: %r", future.exception())


__all__ = [
    "CALL_KEYS",
    "anchor_time",
    "cached_playbook_hash",
    "check_call_start",
    "check_call_values",
    "check_options",
    "check_python_tools",
    "language_of",
    "phone_region",
    "playbook_hash",
    "resolve_env",
    "warm_values_once",
    "zone_of",
]
