"""The Talker's view (SPEC §8).

``build_talker_request`` runs on every segment, so it only reads: the guidance template and
views were compiled at load (a playbook built without the loader gets its guidance compiled
once, on first use, and cached on the checkpoint). The system message puts what is stable for
the call first (persona, voice guidelines, date anchor) for prompt caching, then the step:
goal and guidance, still-needed slots, read-back items, refusals, steering notes, never_say,
known values with their status, views, and what this segment must do. The transcript follows,
packed newest-first into the token budget (``transcript_packing.py``, re-exported here). Env
values are never in the view.

The never_say stream filter lives in ``never_say.py``; ``NeverSayFilter`` is re-exported here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from ..format import lookups
from ..format.playbook import Checkpoint, Playbook
from ..lang.spoken import spoken_date, spoken_digits, spoken_time
from ..log.events import FunctionCall
from ..log.slots import read_back_items
from .director import current_checkpoint, date_anchor
from .models import TalkerRequest
from .never_say import NeverSayFilter
from .transcript_packing import ENTRY_OVERHEAD, PLACEHOLDER, estimate_tokens, packed_transcript

PURPOSES = ("opening", "reply", "follow_through", "closing")

VOICE_GUIDELINES = (
    "You are speaking on a live voice call; everything you write is spoken aloud. Use short "
    "spoken sentences, one to three per turn. Ask one question at a time. No lists, no "
    "markdown, no emojis, no stage directions. Never mention tools, systems, steps, notes or "
    "these instructions. State only facts given here (the step, Known information, Reference "
    "data); if asked something else, say you will check."
)
_PURPOSE_LINES = {
    "opening": "This is the start of the call: greet the caller and begin as the goal says.",
    "follow_through": "We just moved to this step: speak now. Go straight to what this step "
                      "needs; do not repeat what was just said.",
    "closing": "The call is ending: give a brief, warm close in one or two short sentences. "
               "No questions, no offers, no new information.",
}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _guidance_template(checkpoint: Checkpoint) -> Any | None:
    """The compiled guidance; compiled once here only if the loader did not (cached after)."""
    template = lookups.guidance(checkpoint)
    if template is None and checkpoint.guidance.strip():
        from ..lang.templates import (
            compile_speech,  # only for playbooks built without the loader (jinja2 not imported otherwise)
        )

        template = compile_speech(checkpoint.guidance)
        checkpoint._guidance = template
    return template


@lru_cache(maxsize=1024)
def _spoken(kind: str, value: str, language: str) -> str:
    """Spoken form of a stored date, time or phone (Babel; cached, values repeat every turn)."""
    if kind == "date":
        return str(spoken_date(value, language))
    if kind == "time":
        return str(spoken_time(value, language))
    return str(spoken_digits(value))


def _spoken_value(spec_type: str | None, value: Any, language: str, *,
                  read_back: bool = False) -> str:
    """A value as the Talker should say it: dates and times in words; phones digit by digit
    when read back (the stored E.164 form elsewhere)."""
    if isinstance(value, str):
        if spec_type in ("date", "time") or (read_back and spec_type == "phone"):
            try:
                return _spoken(spec_type, value, language)
            except ValueError:
                return value  # an unknown language: the stored form is still right
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (dict, list)):
        return _json(value)
    return str(value)


def _language(playbook: Playbook) -> str:
    language = playbook.guidelines.language
    if isinstance(language, list):
        return language[0] if language else "en"
    return language or "en"


def _style(playbook: Playbook) -> str:
    """Tone and language from ``guidelines`` (stable for the playbook)."""
    guide = playbook.guidelines
    text = f" Tone: {guide.tone}."
    language = guide.language
    if isinstance(language, list):
        if language:
            text += f" Speak the caller's language among: {', '.join(language)}."
    elif language and not language.lower().startswith("en"):
        text += f" Speak {language}."
    return text


def view_values(playbook: Playbook, scope: Mapping[str, Any],
                on_error: Callable[[str], None] | None) -> dict[str, Any]:
    """Every view's value on a scope without env; None and empty values are left out.

    Every spoken template reads these as ``views.<name>``: guidance here, verbatim lines,
    exit lines and silence prompts in ``turn/quiesce.py`` (SPEC §2.2)."""
    out: dict[str, Any] = {}
    for name, expr in lookups.views(playbook).items():
        handler = None if on_error is None else (lambda d, n=name: on_error(f"view:{n}:{d}"))
        value = expr.evaluate(scope, on_error=handler)
        if value is None or value == [] or value == {} or value == "":
            continue
        out[name] = value
    return out


def _system_message(state: Any, playbook: Playbook, purpose: str,
                    scope: Mapping[str, Any], on_error: Callable[[str], None] | None) -> str:
    cp = current_checkpoint(state, playbook)
    cache = lookups.cache_for(playbook)
    stable = cache.get("talker_stable")
    if stable is None:
        # Persona, voice guidelines and style: the same for every segment of every call.
        persona = playbook.persona.strip() or "You are a friendly, efficient phone assistant."
        stable = cache["talker_stable"] = (
            persona + "\n\n" + VOICE_GUIDELINES + _style(playbook), _language(playbook))
    head, language = stable
    blocks: list[str] = [head, date_anchor(state)]

    views = view_values(playbook, scope, on_error) if lookups.views(playbook) else {}
    step = ["## Current step"]
    if cp.goal.strip():
        step.append(f"Goal: {cp.goal.strip()}")
    template = _guidance_template(cp)
    if template is not None:
        text, error = template.render({**scope, "views": views} if views else scope)
        if error is not None and on_error is not None:
            on_error(f"guidance:{state.checkpoint}:{error}")
        if text.strip():
            step.append(text.strip())
    blocks.append("\n".join(step))

    needed = [k for k, spec in cp.slots.items() if spec.required and not state.filled(k)]
    items = []
    for key in read_back_items(state, playbook):
        if not state.filled(key):
            # Denied: there is nothing to read back, the value is asked for again.
            if key not in needed:
                needed.append(key)
            continue
        spec = lookups.slot_spec(playbook, key)
        items.append(f"{key}: " + _spoken_value(spec.type if spec else None, state.value(key),
                                                  language, read_back=True))
    if needed:
        denied = getattr(state, "denied", ())
        blocks.append("Still needed: " + ", ".join(
            f"{k} (the caller said the last value was wrong; ask again)" if k in denied else k
            for k in needed))
    if items:
        blocks.append("Read back and confirm: " + "; ".join(items) + ". Read these back to the "
                      "caller in one sentence and ask whether they are right.")

    refusals = [getattr(r, "message", r) for r in state.refusals]
    if refusals:
        blocks.append("Refused values (tell the caller and ask again):\n"
                      + "\n".join(f"- {m}" for m in refusals))

    if state.pending_notes:
        notes = [f"- {'Correction: ' if n.kind == 'repair' else ''}{n.text}"
                 for n in state.pending_notes if n.kind != "instruction"]
        if notes:
            blocks.append("Notes from the supervisor (act on them):\n" + "\n".join(notes))
        asked = [n.text for n in state.pending_notes if n.kind == "instruction"]
        if asked:
            # generate_reply(instructions=...): the host asks for this reply in particular.
            blocks.append("Instructions for this reply (follow them):\n"
                          + "\n".join(f"- {text}" for text in asked))

    if cp.never_say:
        blocks.append("Never say: " + "; ".join(cp.never_say))

    if state.slots:
        known = []
        for key, slot in state.slots.items():
            spec = lookups.slot_spec(playbook, key)
            line = f"- {key}: {_spoken_value(spec.type if spec else None, slot.value, language)}"
            if slot.status == "provisional":
                line += " (not yet confirmed)"
            known.append(line)
        blocks.append("## Known information\n" + "\n".join(known))

    if views:
        blocks.append("## Reference data\n" + "\n".join(
            f"- {name}: {value if isinstance(value, str) else _json(value)}"
            for name, value in views.items()))

    line = _PURPOSE_LINES.get(purpose)
    if line:
        blocks.append(line)
    return "\n\n".join(blocks)


def function_messages(events: list[Any]) -> list[dict[str, Any]]:
    """This turn's host function calls and results as chat messages, in log order.

    ``{"role": "assistant", "content": "", "tool_calls": [{"id", "name", "arguments"}]}`` for a
    call, ``{"role": "tool", "tool_call_id", "name", "content"}`` for its result (OpenAI's
    shape; the LiveKit adapter turns them into ``FunctionCall`` / ``FunctionCallOutput``).
    """
    out: list[dict[str, Any]] = []
    for event in events:
        if isinstance(event, FunctionCall):
            out.append({"role": "assistant", "content": "", "tool_calls": [
                {"id": event.call_id, "name": event.name, "arguments": event.arguments}]})
        else:
            out.append({"role": "tool", "tool_call_id": event.call_id, "name": event.name,
                        "content": event.output, "is_error": event.is_error})
    return out


def build_talker_request(
    state: Any,
    playbook: Playbook,
    *,
    purpose: str,
    token_budget: int = 4000,
    views_scope: Mapping[str, Any] | None = None,
    on_error: Callable[[str], None] | None = None,
) -> TalkerRequest:
    """The Talker's messages for one segment, rendered from the state as it is now.

    ``views_scope``: the scope for guidance and views (default ``state.scope()``); any env in
    it is dropped. ``on_error(detail)`` is called for a guidance render or view error, so the
    runtime can log one ``degraded`` event. The transcript's message dicts are shared with the
    call's later requests (packing stays flat in call length): read them, do not change them.
    """
    if purpose not in PURPOSES:
        raise ValueError(f"unknown Talker purpose {purpose!r}; use one of {', '.join(PURPOSES)}")
    if token_budget < 1:
        raise ValueError(f"token_budget must be at least 1, got {token_budget}")
    scope = state.scope() if views_scope is None else views_scope
    if scope.get("env"):
        scope = {**scope, "env": {}}  # env never reaches the Talker (SPEC §2.2)
    system = _system_message(state, playbook, purpose, scope, on_error)
    budget = token_budget - estimate_tokens(system) - ENTRY_OVERHEAD
    messages = [{"role": "system", "content": system}, *packed_transcript(state, budget)]
    if state.function_calls:
        messages.extend(function_messages(state.function_calls))
    return TalkerRequest(messages=messages, purpose=purpose,  # type: ignore[arg-type]
                         spoke_from_version=state.version)


__all__ = ["PLACEHOLDER", "PURPOSES", "NeverSayFilter", "build_talker_request",
           "estimate_tokens", "function_messages", "view_values"]
