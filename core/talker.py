"""The Talker's view (SPEC §8).

``build_talker_request`` runs on every segment, so it only reads: the guidance template and
views were compiled at load (a playbook built without the loader gets its guidance compiled
once, on first use, and cached on the checkpoint). The system message puts what is stable for
the call first (persona, voice guidelines, date anchor) for prompt caching, then the step:
goal and guidance, still-needed slots, read-back items, refusals, steering notes, never_say,
known values with their status, views, and what this segment must do. The transcript follows,
packed newest-first into the token budget. Env values are never in the view.

The never_say stream filter lives in ``never_say.py``; ``NeverSayFilter`` is re-exported here.
"""

from __future__ import annotations

import json
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from . import lookups
from .director import current_checkpoint, date_anchor
from .models import TalkerRequest
from .never_say import NeverSayFilter
from .playbook import Checkpoint, Playbook
from .slots import read_back_items
from .spoken import spoken_date, spoken_digits, spoken_time

PURPOSES = ("opening", "reply", "follow_through", "closing")
PLACEHOLDER = "[call connected]"
ENTRY_OVERHEAD = 4

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


def estimate_tokens(text: str) -> int:
    """Cheap token estimate: UTF-8 bytes / 4, at least 1."""
    return max(1, len(text.encode("utf-8")) // 4)


def _guidance_template(checkpoint: Checkpoint) -> Any | None:
    """The compiled guidance; compiled once here only if the loader did not (cached after)."""
    template = lookups.guidance(checkpoint)
    if template is None and checkpoint.guidance.strip():
        from .templates import compile_speech  # only for playbooks built without the loader

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


def _views(playbook: Playbook, scope: Mapping[str, Any],
           on_error: Callable[[str], None] | None) -> dict[str, Any]:
    """Every view's value on a scope without env; None and empty values are left out."""
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

    views = _views(playbook, scope, on_error) if lookups.views(playbook) else {}
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
                 for n in state.pending_notes]
        blocks.append("Notes from the supervisor (act on them):\n" + "\n".join(notes))

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


def _entry_cost(text: str) -> int:
    return max(1, len(text.encode("utf-8")) >> 2) + ENTRY_OVERHEAD  # = estimate_tokens + 4


def _packable(entry: Any) -> str | None:
    """The text an entry contributes to the Talker's transcript, or None when it has none."""
    if entry.superseded:
        return None
    text = entry.heard_text if entry.role == "assistant" else entry.text
    if not text or text.isspace():
        return None  # the caller heard nothing of it
    return text


def _messages(kept: list[tuple[str, str]]) -> list[dict[str, str]]:
    """Oldest-first (role, text) pairs as messages, roles merged, starting with a user one."""
    messages: list[dict[str, str]] = []
    for role, text in kept:
        if messages and messages[-1]["role"] == role:
            # Several segments of one turn are one message (providers want alternation).
            messages[-1]["content"] += " " + text
        else:
            messages.append({"role": role, "content": text})
    if not messages or messages[0]["role"] != "user":
        messages.insert(0, {"role": "user", "content": PLACEHOLDER})
    return messages


def _pack(transcript: list[Any], budget: int) -> list[dict[str, str]]:
    """Newest-first into ``budget`` tokens; the newest entry always kept; roles merged.

    The reference packing (and the one for states without ``view_cache``); ``_Packer`` gives
    the same messages without walking the kept entries again on every segment.
    """
    kept: list[tuple[str, str]] = []
    used = 0
    for entry in reversed(transcript):
        text = _packable(entry)
        if text is None:
            continue
        cost = _entry_cost(text)
        if kept and used + cost > budget:
            break
        kept.append((entry.role, text))
        used += cost
    kept.reverse()
    return _messages(kept)


class _Message:
    """A message as an instance ``__dict__``: CPython keeps those with keys shared between
    instances (~110 bytes instead of ~190 for a literal), and it is an ordinary ``dict``."""

    def __init__(self, role: str, content: str) -> None:
        self.role = role
        self.content = content


def _shared_message(role: str, content: str) -> dict[str, str]:
    """``{"role": role, "content": content}`` for the packer's kept window (smaller)."""
    return vars(_Message(role, content))


class _Packer:
    """``_pack`` kept incrementally for one conversation (SPEC §14: flat in call length).

    It folds each transcript entry once: the packable ones get a running token total, and
    runs of one role are merged into one message text as they grow. Packing into a budget is
    then a binary search for the oldest entry that still fits. The message dicts of whole runs
    inside the last window are kept and handed to the next request too (only a run that
    grew gets a new dict), so consecutive requests share them: the messages are read-only,
    like the Director's shared schema. An edited entry (``state.transcript_edits``: a
    correction or a supersede, nearly always one of the newest) drops the fold back to that
    entry and redoes the rest.
    """

    __slots__ = ("_cum", "_edits", "_gd0", "_gdicts", "_gfirst", "_groles", "_gtexts",
                 "_index", "_seen", "_texts")

    def __init__(self) -> None:
        self._seen = 0  # transcript entries folded
        self._edits = 0  # state.transcript_edits folded
        self._index = array("q")  # transcript index of each packable entry
        self._cum = array("q", [0])  # _cum[k]: token cost of packable entries before k
        self._texts: list[str] = []
        self._gfirst = array("q")  # first packable entry of each run of one role
        self._groles: list[str] = []
        self._gtexts: list[str] = []  # each run's texts joined by single spaces
        # The message dicts of runs _gd0, _gd0 + 1, ...: the last window's, up to the newest.
        self._gd0 = 0
        self._gdicts: list[dict[str, str]] = []

    def _drop_from(self, position: int) -> None:
        """Forget transcript entries from index ``position`` on (they are folded again)."""
        keep = bisect_left(self._index, position)
        del self._index[keep:], self._cum[keep + 1:], self._texts[keep:]
        self._gdicts.clear()
        groups = bisect_left(self._gfirst, keep)
        del self._gfirst[groups:], self._groles[groups:], self._gtexts[groups:]
        if groups and self._gfirst[-1] < keep:
            # The last run lost its newer entries: its text is rebuilt from what is left.
            self._gtexts[-1] = " ".join(self._texts[self._gfirst[-1]:keep])
        self._seen = min(self._seen, position)

    def sync(self, transcript: list[Any], edits: list[int]) -> None:
        if len(edits) > self._edits:
            self._drop_from(min(edits[self._edits:]))
            self._edits = len(edits)
        if len(transcript) < self._seen:  # not an append-only transcript: start over
            self._drop_from(0)
        for i in range(self._seen, len(transcript)):
            entry = transcript[i]
            text = _packable(entry)
            if text is None:
                continue
            role = entry.role
            self._index.append(i)
            self._cum.append(self._cum[-1] + _entry_cost(text))
            self._texts.append(text)
            if self._groles and self._groles[-1] == role:
                self._gtexts[-1] += " " + text
                if self._gdicts and self._gd0 + len(self._gdicts) == len(self._groles):
                    self._gdicts.pop()  # the run grew: its message is made anew
            else:
                self._gfirst.append(len(self._texts) - 1)
                self._groles.append(role)
                self._gtexts.append(text)
        self._seen = len(transcript)

    def pack(self, budget: int) -> list[dict[str, str]]:
        count = len(self._texts)
        if not count:
            return _messages([])
        cum = self._cum
        # The oldest entry from which the newest ones fit the budget (the newest always).
        start = min(bisect_left(cum, cum[count] - budget, 0, count), count - 1)
        group = bisect_right(self._gfirst, start) - 1
        groles, gtexts = self._groles, self._gtexts
        runs = len(groles)
        partial: dict[str, str] | None = None
        if self._gfirst[group] != start:  # the window begins inside a run: its newer part
            end = self._gfirst[group + 1] if group + 1 < runs else count
            partial = {"role": groles[group], "content": " ".join(self._texts[start:end])}
            group += 1
        dicts, first = self._gdicts, self._gd0
        if not dicts or group < first:
            # Nothing kept, or a bigger budget reaches further back: build the window anew.
            dicts.clear()
            first = group
        elif group > first:  # the window moved on: runs before it are not shared any more
            del dicts[:group - first]
            first = group
        dicts.extend([_shared_message(groles[g], gtexts[g])
                      for g in range(first + len(dicts), runs)])
        self._gd0 = first
        messages = [partial, *dicts] if partial is not None else dicts.copy()
        if not messages or messages[0]["role"] != "user":
            messages.insert(0, {"role": "user", "content": PLACEHOLDER})
        return messages


def _packed(state: Any, budget: int) -> list[dict[str, str]]:
    """The transcript messages of ``state`` within ``budget`` (incremental when it can be)."""
    cache = getattr(state, "view_cache", None)
    edits = getattr(state, "transcript_edits", None)
    if cache is None or edits is None:
        return _pack(state.transcript, budget)
    packer = cache.get("talker_pack")
    if packer is None:
        packer = cache["talker_pack"] = _Packer()
    packer.sync(state.transcript, edits)
    return packer.pack(budget)


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
    messages = [{"role": "system", "content": system}, *_packed(state, budget)]
    return TalkerRequest(messages=messages, purpose=purpose,  # type: ignore[arg-type]
                         spoke_from_version=state.version)


__all__ = ["PLACEHOLDER", "PURPOSES", "NeverSayFilter", "build_talker_request",
           "estimate_tokens"]
