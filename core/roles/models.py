"""The two model seams of the engine (SPEC §1) and deterministic stand-ins for tests and benches.

The engine never talks to an LLM directly: it calls a ``DirectorModel`` (one structured verdict
per user turn) and a ``TalkerModel`` (streamed speech). The LiveKit plugin adapts its LLMs to
these protocols; ``ScriptedDirector`` and ``ScriptedTalker`` play a fixed script so tests are
exact and benches measure the engine, not a model.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import re
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

Purpose = Literal["opening", "reply", "follow_through", "closing"]
PURPOSES: frozenset[str] = frozenset({"opening", "reply", "follow_through", "closing"})


@dataclass(slots=True)
class DirectorRequest:
    """One Director call: chat messages, the per-checkpoint verdict schema and the forced tool name."""

    messages: list[dict[str, Any]]
    schema: dict[str, Any]
    tool_name: str = "record_verdict"


@dataclass(slots=True)
class TalkerRequest:
    """One Talker segment. ``spoke_from_version`` is the log version the view was built from."""

    messages: list[dict[str, Any]]
    purpose: Purpose
    spoke_from_version: int

    def __post_init__(self) -> None:
        if self.purpose not in PURPOSES:
            raise ValueError(
                f"TalkerRequest.purpose {self.purpose!r} is not one of {sorted(PURPOSES)}"
            )


@dataclass(frozen=True, slots=True)
class TalkerToolCall:
    """A host function tool the Talker called, yielded by ``TalkerModel.speak`` between texts.

    The host (the LiveKit plugin) runs it; the engine logs it as a ``function_call`` event and
    does not count the segment as empty. ``arguments`` is the JSON text the model sent.
    """

    call_id: str
    name: str
    arguments: str = "{}"


@runtime_checkable
class DirectorModel(Protocol):
    """Returns a verdict object (SPEC §7) or raw text the engine parses (fenced JSON is fine)."""

    async def decide(self, request: DirectorRequest) -> dict[str, Any] | str: ...


@runtime_checkable
class TalkerModel(Protocol):
    """Streams the spoken text. Consumers ``aclose()`` the stream when they stop early.

    A host that offers its own function tools may also yield ``TalkerToolCall`` items.
    """

    def speak(self, request: TalkerRequest) -> AsyncIterator[str]: ...


Verdict = dict[str, Any] | str | BaseException | Callable[[DirectorRequest], Any]
Reply = str | BaseException | Callable[[TalkerRequest], Any]


def _is_error(item: object) -> bool:
    return isinstance(item, BaseException) or (
        isinstance(item, type) and issubclass(item, BaseException)
    )


def _check_script(owner: str, items: list[Any], kinds: tuple[type, ...], wanted: str) -> None:
    """Refuse a malformed script when it is built, not in the middle of a test conversation."""
    for i, item in enumerate(items):
        if not (isinstance(item, kinds) or _is_error(item) or callable(item)):
            raise TypeError(
                f"{owner} item #{i} is a {type(item).__name__}; script {wanted}, "
                "an exception or a callable taking the request"
            )


def _raise_if_scripted_error(item: object) -> None:
    """An exception (instance or class) in a script stands for a model error at that call."""
    if isinstance(item, BaseException):
        raise item
    if isinstance(item, type) and issubclass(item, BaseException):
        raise item()


class ScriptedDirector:
    """Plays verdicts in order, one per ``decide`` call (a retry pops another); ``{}`` when exhausted.

    Each item is a verdict dict (returned as a copy, so the engine cannot edit the script), a
    string (returned raw, to test parsing), a callable taking the request (may be async), or
    an exception, which is raised to script a model error. ``delay`` seconds pass before the
    answer; the verdict is taken first, so a call cut short by ``director_timeout`` still
    uses it up, like a real model call would.
    """

    def __init__(self, verdicts: Iterable[Verdict] = (), delay: float = 0.0) -> None:
        if delay < 0:
            raise ValueError(f"ScriptedDirector delay must be >= 0 seconds, got {delay}")
        self._verdicts: list[Verdict] = list(verdicts)
        _check_script("ScriptedDirector", self._verdicts, (dict, str), "a verdict dict, a string")
        self._next = 0
        self.delay = delay
        self.requests: list[DirectorRequest] = []

    @property
    def remaining(self) -> int:
        """How many scripted verdicts have not been used yet."""
        return len(self._verdicts) - self._next

    async def decide(self, request: DirectorRequest) -> dict[str, Any] | str:
        """Record the request, take the next verdict, wait ``delay``, then answer with it."""
        self.requests.append(request)
        item: Verdict = {}
        if self._next < len(self._verdicts):
            item = self._verdicts[self._next]
            self._next += 1
        if self.delay > 0:
            await asyncio.sleep(self.delay)
        _raise_if_scripted_error(item)
        if callable(item):
            item = item(request)
            if inspect.isawaitable(item):
                item = await item
        if isinstance(item, dict):
            return copy.deepcopy(item)
        if isinstance(item, str):
            return item
        raise TypeError(
            f"ScriptedDirector verdict callable returned a {type(item).__name__}; "
            "return a verdict dict or a string"
        )


_WORD = re.compile(r"\s*\S+\s*")


def chunk_words(text: str) -> list[str]:
    """Split text into word chunks that join back to exactly ``text`` ("Hi " "there!")."""
    chunks = _WORD.findall(text)
    if not chunks and text:
        return [text]  # whitespace only: still streamed, so nothing is lost
    return chunks


class ScriptedTalker:
    """Plays replies in order, one per ``speak`` call, streamed word by word; the last repeats.

    Each item is a reply string, a callable taking the request and returning one, or an
    exception, raised when the stream starts (its first ``__anext__``) to script a model error.
    The stream waits ``first_token_delay`` before its first chunk and ``token_delay`` between
    chunks; it is a plain async generator, so cancelling or ``aclose()`` stops it at once.
    """

    def __init__(
        self,
        replies: Iterable[Reply] = (),
        first_token_delay: float = 0.0,
        token_delay: float = 0.0,
    ) -> None:
        if first_token_delay < 0 or token_delay < 0:
            raise ValueError(
                "ScriptedTalker delays must be >= 0 seconds, got "
                f"first_token_delay={first_token_delay}, token_delay={token_delay}"
            )
        items = list(replies)
        _check_script("ScriptedTalker", items, (str,), "a reply string")
        # split at construction: a bench measures the engine, not re-chunking the script
        self._replies: list[tuple[Reply, list[str] | None]] = [
            (r, chunk_words(r) if isinstance(r, str) else None) for r in items
        ]
        self._next = 0
        self.first_token_delay = first_token_delay
        self.token_delay = token_delay
        self.requests: list[TalkerRequest] = []

    def speak(self, request: TalkerRequest) -> AsyncIterator[str]:
        """Record the request and take the next reply now; the returned stream speaks it."""
        self.requests.append(request)
        if not self._replies:
            return self._stream(request, "", [])
        index = min(self._next, len(self._replies) - 1)
        self._next += 1
        reply, chunks = self._replies[index]
        return self._stream(request, reply, chunks)

    async def _stream(
        self, request: TalkerRequest, reply: Reply, chunks: list[str] | None
    ) -> AsyncIterator[str]:
        _raise_if_scripted_error(reply)
        if chunks is None:
            text = reply(request) if callable(reply) else reply
            if inspect.isawaitable(text):
                text = await text
            if not isinstance(text, str):
                raise TypeError(
                    f"ScriptedTalker reply callable returned {type(text).__name__}; return a string"
                )
            chunks = chunk_words(text)
        for i, chunk in enumerate(chunks):
            delay = self.first_token_delay if i == 0 else self.token_delay
            if delay > 0:
                await asyncio.sleep(delay)
            yield chunk


__all__ = [
    "PURPOSES",
    "DirectorModel",
    "DirectorRequest",
    "Purpose",
    "ScriptedDirector",
    "ScriptedTalker",
    "TalkerModel",
    "TalkerRequest",
    "TalkerToolCall",
    "chunk_words",
]
