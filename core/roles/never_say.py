"""The never_say stream filter (SPEC §8).

``NeverSayFilter`` enforces ``never_say`` on the stream without delaying it: it holds back only
a tail that could still grow into a phrase (at most the longest phrase's length minus one
characters), cuts a matched phrase and the rest of its sentence, and never retracts text it
already returned. ``talker.py`` re-exports it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

_SENTENCE_END = re.compile(r"[.!?\n…。।]")


@lru_cache(maxsize=256)
def _never_say_tables(
    phrases: tuple[str, ...],
) -> tuple[re.Pattern[str] | None, frozenset[str], re.Pattern[str], int]:
    """The match pattern, the lowered proper prefixes, a pattern of the characters a prefix
    can start with, and the longest hold, for one list of never_say phrases."""
    cleaned = sorted({p for p in phrases if p and p.strip()}, key=len, reverse=True)
    pattern = (re.compile("|".join(re.escape(p) for p in cleaned), re.IGNORECASE)
               if cleaned else None)
    prefixes = frozenset(p.lower()[:i] for p in cleaned for i in range(1, len(p)))
    # A tail can only be held from one of these. Both Greek sigmas, since lowering picks one
    # by context.
    firsts = {prefix[0] for prefix in prefixes}
    if firsts & {"σ", "ς"}:
        firsts |= {"σ", "ς"}
    first_chars = re.compile("[" + "".join(re.escape(c) for c in sorted(firsts)) + "]"
                             if firsts else "(?!)")
    hold_max = max((len(p) for p in cleaned), default=1) - 1
    return pattern, prefixes, first_chars, hold_max


class NeverSayFilter:
    """Removes never_say phrases from a streamed reply without delaying it.

    ``feed(chunk)`` returns the text that is safe to speak now. It holds back only the tail
    that is a proper prefix of some phrase (case-insensitive), so at most the longest phrase's
    length minus one characters, and nothing at all when no phrase could start there. A
    matched phrase is cut together with the rest of its sentence (up to the next ``.``, ``!``,
    ``?`` or newline); speech resumes after it. ``close()`` returns what was held back.
    Text once returned is never retracted. Without phrases, chunks pass through unchanged.
    """

    def __init__(self, phrases: Iterable[str]) -> None:
        # A checkpoint's phrases are fixed: their pattern and prefix table are built once.
        self._pattern, self._prefixes, self._firsts, self.hold_max = _never_say_tables(
            tuple(phrases))
        self._pending = ""
        self._dropping = False
        self._strip_leading = False
        self._last = ""  # last character returned, to keep one space across a cut

    def feed(self, chunk: str) -> str:
        """Text of ``chunk`` (plus anything held before) that is safe to speak now."""
        pattern = self._pattern
        if pattern is None:
            return chunk
        text = self._pending + chunk
        if self._dropping or self._strip_leading or pattern.search(text) is not None:
            return self._process(text, final=False)
        # The common case (no phrase, nothing being cut): what ``_process`` does for it.
        keep = len(text) - self._held(text)
        safe, self._pending = text[:keep], text[keep:]
        if safe:
            self._last = safe[-1]
        return safe

    def close(self) -> str:
        """The held-back remainder, filtered; the filter is empty afterwards."""
        if self._pattern is None:
            return ""
        text, self._pending = self._pending, ""
        return self._process(text, final=True)

    def _held(self, text: str) -> int:
        """Length of the longest tail of ``text`` that could still become a phrase."""
        n = len(text)
        first = max(0, n - self.hold_max)
        tail = text[first:].lower()
        prefixes = self._prefixes
        if len(tail) == n - first:  # lowering kept the length: positions line up
            search = self._firsts.search  # only where a phrase could start
            match = search(tail)
            while match is not None:
                i = match.start()
                if text[first + i:].lower() in prefixes:
                    return n - first - i
                match = search(tail, i + 1)
            return 0
        for size in range(n - first, 0, -1):
            if text[-size:].lower() in prefixes:
                return size
        return 0

    def _process(self, text: str, *, final: bool) -> str:
        assert self._pattern is not None
        out: list[str] = []
        while text:
            if self._dropping:
                end = _SENTENCE_END.search(text)
                if end is None:
                    text = ""
                    break
                text = text[end.end():]
                self._dropping = False
                self._strip_leading = True
                continue
            if self._strip_leading:
                text = text.lstrip()
                if not text:
                    break
                self._strip_leading = False
                last = "".join(out)[-1:] or self._last
                if last and not last.isspace():
                    text = " " + text  # "Great. [cut] Next" keeps its space
            match = self._pattern.search(text)
            if match is not None:
                out.append(text[: match.start()])
                text = text[match.end():]
                self._dropping = True
                continue
            hold = 0 if final else self._held(text)
            out.append(text[: len(text) - hold])
            text = text[len(text) - hold:]
            break
        self._pending = "" if final else text
        result = "".join(out)
        if result:
            self._last = result[-1]
        return result


__all__ = ["NeverSayFilter"]
