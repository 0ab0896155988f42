"""The Talker's transcript, packed newest-first into a token budget (SPEC §8, §14).

``pack_transcript`` is the reference packing; ``packed_transcript`` gives the same messages
incrementally for a state with a ``view_cache`` (``_Packer``: each entry folded once, a budget
window found by binary search, the window's message dicts shared by the call's later
requests). ``talker.py`` builds the rest of the view and re-exports the public names.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from typing import Any

PLACEHOLDER = "[call connected]"
ENTRY_OVERHEAD = 4


def estimate_tokens(text: str) -> int:
    """Cheap token estimate: UTF-8 bytes / 4, at least 1."""
    return max(1, len(text.encode("utf-8")) // 4)


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


def pack_transcript(transcript: list[Any], budget: int) -> list[dict[str, str]]:
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
    """``pack_transcript`` kept incrementally for one conversation (SPEC §14: flat in call length).

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


def packed_transcript(state: Any, budget: int) -> list[dict[str, str]]:
    """The transcript messages of ``state`` within ``budget`` (incremental when it can be)."""
    cache = getattr(state, "view_cache", None)
    edits = getattr(state, "transcript_edits", None)
    if cache is None or edits is None:
        return pack_transcript(state.transcript, budget)
    packer = cache.get("talker_pack")
    if packer is None:
        packer = cache["talker_pack"] = _Packer()
    packer.sync(state.transcript, edits)
    return packer.pack(budget)


__all__ = ["ENTRY_OVERHEAD", "PLACEHOLDER", "estimate_tokens", "pack_transcript",
           "packed_transcript"]
