"""Model URIs (SPEC §12): one meaning everywhere (CLI, ``DialogMachineLLM``, worker).

* ``openai/<model>``: ``livekit.plugins.openai.LLM`` with ``OPENAI_API_KEY`` (or, when a
  ``base_url`` is given, e.g. from ``SUPERDIALOG_LLM_BASE_URL``, that OpenAI-compatible server);
* ``http(s)://host:port/v1#<model>``: the same plugin against any OpenAI-compatible server;
* ``livekit/<provider>/<model>``: LiveKit's hosted inference (needs LiveKit keys);
* ``local/<name-or-gguf>``: the local llama.cpp server (the ``local`` extra, see ``_local_llm``);
* ``scripted:<file.yaml>``: a script of replies or verdicts used in order (``scripted.py``), so
  ``chat``, ``replay`` and the worker run without a model.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from superdialog_core.errors import ConfigError, Problem

if TYPE_CHECKING:
    from livekit.agents import llm

URI_FORMS = (
    "openai/<model>",
    "http(s)://host:port/v1#<model>",
    "livekit/<provider>/<model>",
    "local/<name-or-gguf>",
    "scripted:<file.yaml>",
)
_HINT = "use one of: " + ", ".join(URI_FORMS)
# An OpenAI-compatible server without auth still needs some key string in the client.
_NO_KEY = "not-needed"
# How the adapters ask a local llama.cpp model (see adapters.ModelHints): a 135M model stays
# short, a verdict fits its schema's bounds, and one server answers both roles one at a time.
LOCAL_TALKER_MAX_TOKENS = 60
LOCAL_DIRECTOR_MAX_TOKENS = 384
LOCAL_TIMEOUT = 60.0
LOCAL_MAX_STRING = 60


def _problem(uri: str, message: str, hint: str = _HINT) -> ConfigError:
    return ConfigError([Problem(f"model URI {uri!r}", message, hint)])


def _openai_llm(model: str, *, base_url: str | None, api_key: str | None) -> llm.LLM:
    from livekit.plugins import openai

    kwargs: dict[str, Any] = {"model": model}
    if base_url:
        kwargs["base_url"] = base_url
    if api_key:
        kwargs["api_key"] = api_key
    return openai.LLM(**kwargs)


def _local_llm(uri: str, name: str, role: str | None = None) -> llm.LLM:
    """``local/<name>``: the llama.cpp server of ``superdialog_livekit.local`` (the ``local`` extra).

    Starting the server blocks until it answers and passed a one-token self-test (call it at
    load, e.g. in a worker's prewarm). Any failure (llama-cpp-python or the model package
    missing, server not ready, server died) is a ConfigError that says the cause and the fix.
    """
    try:
        from superdialog_livekit.local import LocalModelError, LocalServerDied, local_server
    except ImportError as exc:
        raise _problem(uri, "local models need the 'local' extra",
                       "pip install 'superdialog-livekit[local]'") from exc
    try:
        # One server per role (talker, director): each keeps its own prompt prefix cached.
        server = local_server(name, instance=role if role in ("talker", "director") else "")
    except LocalServerDied as exc:  # it started, then died (its self-test): the cause and fix
        raise ConfigError([Problem(f"model URI {uri!r}", exc.details())]) from exc
    except LocalModelError as exc:
        if "'local' extra" not in str(exc):  # a missing file or an unknown name: not the extra
            raise _problem(uri, str(exc), "write local/smollm2-135m or local/<path to a .gguf "
                           "file>, or use an openai/... or http://...#model URI") from exc
        raise _problem(uri, f"local models need the 'local' extra: {exc}",
                       "pip install 'superdialog-livekit[local]', or use an openai/... or "
                       "http://...#model URI") from exc
    model = _openai_llm(server.alias, base_url=server.base_url, api_key=_NO_KEY)
    # Mark it for the adapters: JSON verdicts through response_format (llama.cpp streams tool
    # calls so that the openai plugin sees empty arguments), short replies, patient timeouts.
    from superdialog_livekit.adapters import ModelHints

    model.superdialog_hints = ModelHints(  # type: ignore[attr-defined]
        json_verdicts=True, talker_max_tokens=LOCAL_TALKER_MAX_TOKENS,
        director_max_tokens=LOCAL_DIRECTOR_MAX_TOKENS, timeout=LOCAL_TIMEOUT,
        max_string_length=LOCAL_MAX_STRING,
    )
    model.local_server = server  # type: ignore[attr-defined]
    return model


SCRIPTED = "scripted:"


def _scripted_llm(uri: str, role: str | None) -> llm.LLM:
    """``scripted:<file.yaml>``: a LiveKit LLM playing the file's list for ``role``."""
    if role not in ("talker", "director"):
        raise _problem(uri, "a scripted model plays the talker or the director; say which",
                       "pass role='talker' or role='director'")
    from .scripted import ScriptedLLM

    return ScriptedLLM(uri, role)


def director_from_uri(uri: str, *, base_url: str | None = None) -> Any:
    """The engine's ``DirectorModel`` for a model URI (``replay`` asks it outside LiveKit).

    ``scripted:`` gives the engine's own ``ScriptedDirector``; any other URI the LiveKit LLM
    it names behind the same adapter ``DialogMachineLLM`` uses (its ``.llm`` is that LLM).
    """
    if isinstance(uri, str) and uri.strip().startswith(SCRIPTED):
        from superdialog_core.roles.scripts import scripted_director

        return scripted_director(uri.strip())
    from .adapters import LiveKitDirector

    return LiveKitDirector(llm_from_uri(uri, base_url=base_url, role="director"))


def llm_from_uri(uri: str, *, base_url: str | None = None, role: str | None = None) -> llm.LLM:
    """A LiveKit ``llm.LLM`` for a model URI; ``ConfigError`` (naming the URI and the fix) otherwise.

    ``base_url`` (e.g. ``$SUPERDIALOG_LLM_BASE_URL``) reroutes ``openai/<model>`` to an
    OpenAI-compatible server; it never changes an explicit ``http(s)://`` URI.
    ``role`` (``talker``/``director``) gives a ``local/...`` model its own server per role.
    """
    if not isinstance(uri, str) or not uri.strip():
        raise _problem(str(uri), "is empty")
    uri = uri.strip()
    if uri.startswith(SCRIPTED):
        return _scripted_llm(uri, role)
    scheme, _, rest = uri.partition("/")
    if uri.startswith(("http://", "https://")):
        parts = urlsplit(uri)
        if not parts.fragment:
            raise _problem(uri, "names no model", "append '#<model>', e.g. http://127.0.0.1:8080/v1#my-model")
        if not parts.netloc:
            raise _problem(uri, "has no host", "write http://host:port/v1#<model>")
        server = parts._replace(fragment="").geturl()
        return _openai_llm(parts.fragment, base_url=server,
                           api_key=os.environ.get("OPENAI_API_KEY") or _NO_KEY)
    if scheme == "openai":
        if not rest:
            raise _problem(uri, "names no model", "write openai/<model>, e.g. openai/gpt-4.1-mini")
        if base_url:
            return _openai_llm(rest, base_url=base_url,
                               api_key=os.environ.get("OPENAI_API_KEY") or _NO_KEY)
        if not os.environ.get("OPENAI_API_KEY"):
            raise _problem(uri, "needs OPENAI_API_KEY, which is not set",
                           "export OPENAI_API_KEY=..., or set SUPERDIALOG_LLM_BASE_URL to an "
                           "OpenAI-compatible server")
        return _openai_llm(rest, base_url=None, api_key=None)
    if scheme == "livekit":
        if rest.count("/") < 1 or not all(rest.split("/", 1)):
            raise _problem(uri, "must name a provider and a model",
                           "write livekit/<provider>/<model>, e.g. livekit/openai/gpt-4.1-mini")
        missing = [v for v in ("LIVEKIT_API_KEY", "LIVEKIT_API_SECRET")
                   if not (os.environ.get(v) or os.environ.get(v.replace("LIVEKIT_", "LIVEKIT_INFERENCE_")))]
        if missing:
            raise _problem(uri, f"LiveKit inference needs {' and '.join(missing)}, not set",
                           "export the LiveKit keys, or use an openai/... or http://...#model URI")
        from livekit.agents import inference

        return inference.LLM(model=rest)
    if scheme == "local":
        if not rest:
            raise _problem(uri, "names no model", "write local/<name-or-gguf>, e.g. local/smollm2-135m")
        return _local_llm(uri, rest, role)
    raise _problem(uri, f"unknown model URI scheme {scheme!r}")


def resolve_llm(model: Any, *, base_url: str | None = None, role: str = "model") -> llm.LLM:
    """``model`` if it already is a LiveKit ``llm.LLM``, else the LLM its URI names."""
    from livekit.agents import llm as lk_llm

    if isinstance(model, lk_llm.LLM):
        return model
    if isinstance(model, str):
        return llm_from_uri(model, base_url=base_url, role=role)
    raise ConfigError([Problem(role, f"must be a livekit.agents.llm.LLM or a model URI, not {type(model).__name__}",
                               _HINT)])


__all__ = ["URI_FORMS", "director_from_uri", "llm_from_uri", "resolve_llm"]
