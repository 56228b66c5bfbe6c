"""create_backend: spec parsing, unknown prefixes and options, plugins."""

from __future__ import annotations

import asyncio

import pytest

from cudal1.llm import (
    BackendOptions,
    Completion,
    LLMBackend,
    ScriptedBackend,
    create_backend,
    known_backends,
    register_backend,
)
from cudal1.llm import registry as registry_module


def test_known_backends_lists_builtins() -> None:
    assert {"openai:MODEL", "hf:PATH", "scripted:PATH_OR_NAME"} <= set(known_backends())


def test_unknown_prefix_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown LLM backend 'vllm'.*openai:MODEL.*hf:PATH"):
        create_backend("vllm:Qwen/Qwen3-8B")


@pytest.mark.parametrize("spec", ["scripted", "scripted:", ":echo", ""])
def test_malformed_spec(spec: str) -> None:
    with pytest.raises(ValueError, match="expected one of"):
        create_backend(spec)


def test_unknown_option_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"invalid options for LLM backend 'scripted'.*latency_s") as info:
        create_backend("scripted:echo", latency=1.0)
    assert "latency" in str(info.value) and "\n" not in str(info.value) and "http" not in str(info.value)


def test_unknown_openai_option_is_an_error() -> None:
    pytest.importorskip("openai")
    with pytest.raises(ValueError, match="max_retries"):
        create_backend("openai:m", max_retires=3)
    with pytest.raises(ValueError, match="max_tokens_field"):
        create_backend("openai:m", max_tokens_field="tokens")


def test_invalid_option_value_is_an_error() -> None:
    with pytest.raises(ValueError, match="max_concurrency"):
        create_backend("scripted:echo", max_concurrency=0)


def test_model_name_may_contain_colons() -> None:
    pytest.importorskip("openai")
    assert create_backend("openai:qwen3:8b").model == "qwen3:8b"


def test_hf_needs_a_local_directory(tmp_path) -> None:
    with pytest.raises(ValueError, match="never downloaded"):
        create_backend("hf:Qwen/Qwen3-8B")


def test_options_reach_the_backend() -> None:
    b = create_backend("scripted:echo", max_concurrency=2, call_timeout_s=3.0, fail_on=[5])
    assert isinstance(b, ScriptedBackend)
    assert (b.max_concurrency, b.call_timeout_s, b.fail_on) == (2, 3.0, frozenset({5}))


class ShoutOptions(BackendOptions):
    suffix: str = "!"


class ShoutBackend(LLMBackend):
    name = "shout"
    Options = ShoutOptions

    def __init__(self, model: str, *, suffix: str = "!", **kwargs) -> None:
        super().__init__(model, **kwargs)
        self.suffix = suffix

    async def _complete(self, messages, params):
        text = messages[-1].content.upper() + self.suffix
        return [Completion(text, "stop", 0, 1, self.model, self.name) for _ in range(params.n)]


def test_registered_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry_module, "_BACKENDS", dict(registry_module._BACKENDS))
    register_backend("shout", ShoutBackend, target="ANYTHING")
    assert "shout:ANYTHING" in known_backends()
    b = create_backend("shout:x", suffix="?")
    out = asyncio.run(b.complete("hey"))
    assert out[0].text == "HEY?" and b.ledger.summary()["calls"] == 1
    with pytest.raises(ValueError, match="suffix"):
        create_backend("shout:x", sufix="?")


def test_openai_options_reach_the_backend_declared_once() -> None:
    pytest.importorskip("openai")
    from cudal1.llm.openai_backend import OpenAIBackend, OpenAIOptions

    b = create_backend(
        "openai:m", max_concurrency=3, timeout_s=7.0, base_url="http://x/v1/", extra_body={"k": 1}
    )
    assert isinstance(b, OpenAIBackend) and isinstance(b.options, OpenAIOptions)
    assert (b.max_concurrency, b.options.timeout_s, b.options.extra_body, b.endpoint) == (
        3,
        7.0,
        {"k": 1},
        "http://x/v1",
    )
    assert OpenAIBackend("m").options == OpenAIOptions()  # built directly: the same defaults
