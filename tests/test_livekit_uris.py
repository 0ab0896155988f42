"""Model URIs (SPEC §12) → LiveKit LLMs, and the errors for URIs that cannot work."""

from __future__ import annotations

import pytest
from livekit.agents import llm
from livekit.plugins import openai
from superdialog_core.errors import ConfigError

from superdialog_livekit.uris import llm_from_uri, resolve_llm


def test_openai_uri_uses_the_openai_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model = llm_from_uri("openai/gpt-4.1-mini")
    assert isinstance(model, openai.LLM)
    assert model.model == "gpt-4.1-mini"
    assert model.provider == "api.openai.com"


def test_openai_uri_without_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        llm_from_uri("openai/gpt-4.1-mini")


def test_base_url_reroutes_openai_uris(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = llm_from_uri("openai/qwen", base_url="http://127.0.0.1:9999/v1")
    assert model.model == "qwen"
    assert model.provider == "127.0.0.1:9999"


def test_http_uri_targets_any_openai_compatible_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = llm_from_uri("http://127.0.0.1:8080/v1#smollm2", base_url="http://elsewhere:1/v1")
    assert isinstance(model, openai.LLM)
    assert (model.model, model.provider) == ("smollm2", "127.0.0.1:8080")


def test_livekit_uri_needs_livekit_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("LIVEKIT_API_KEY", "LIVEKIT_API_SECRET", "LIVEKIT_INFERENCE_API_KEY",
                "LIVEKIT_INFERENCE_API_SECRET"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError, match="LIVEKIT_API_KEY and LIVEKIT_API_SECRET"):
        llm_from_uri("livekit/openai/gpt-4.1-mini")
    monkeypatch.setenv("LIVEKIT_API_KEY", "k" * 32)
    monkeypatch.setenv("LIVEKIT_API_SECRET", "s" * 32)
    model = llm_from_uri("livekit/openai/gpt-4.1-mini")
    assert isinstance(model, llm.LLM)
    assert model.model == "openai/gpt-4.1-mini"


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("", "is empty"),
        ("http://127.0.0.1:8080/v1", "names no model"),
        ("openai/", "names no model"),
        ("livekit/gpt", "provider and a model"),
        ("anthropic/claude", "unknown model URI scheme 'anthropic'"),
        ("gpt-4.1", "unknown model URI scheme"),
    ],
)
def test_bad_uris_say_what_is_wrong_and_list_the_forms(uri: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        llm_from_uri(uri)
    text = str(info.value)
    assert message in text
    assert "openai/<model>" in text or "write" in text or "append" in text


def test_local_uri_without_the_extra_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real_find_spec = importlib.util.find_spec
    # Simulate a machine without the 'local' extra, whatever this one has installed.
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llama_cpp" else real_find_spec(name, *a))
    with pytest.raises(ConfigError, match="local models need the 'local' extra"):
        llm_from_uri("local/smollm2-135m")


def test_unknown_local_model_names_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"smollm2-135m|local models need"):
        llm_from_uri("local/not-a-model")


def test_resolve_llm_passes_llm_instances_through_and_rejects_other_types() -> None:
    model = openai.LLM(model="m", base_url="http://127.0.0.1:1/v1", api_key="k")
    assert resolve_llm(model) is model
    with pytest.raises(ConfigError, match=r"talker: must be a livekit\.agents\.llm\.LLM or a model URI"):
        resolve_llm(42, role="talker")
