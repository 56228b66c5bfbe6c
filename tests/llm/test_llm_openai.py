"""The OpenAI-compatible backend against the fake loopback server in conftest.py."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

pytest.importorskip("openai")

from fake_openai_server import Behaviour, FakeOpenAIServer  # noqa: E402

from cudal1.llm import Ledger, LLMError, Message, SamplingParams, create_backend  # noqa: E402
from cudal1.llm.openai_backend import OpenAIBackend  # noqa: E402

# Retry-After in milliseconds keeps the SDK's backoff out of the test's time.
FAST_RETRY = {"retry-after-ms": "10"}


def backend(server: FakeOpenAIServer, **options) -> OpenAIBackend:
    options.setdefault("max_retries", 2)
    options.setdefault("timeout_s", 5.0)
    return create_backend("openai:fake-model", base_url=server.url, **options)


def test_n_samples_usage_and_ledger(fake_server: FakeOpenAIServer) -> None:
    fake_server.replies = ["first answer", "second"]
    fake_server.cached_tokens = 4
    b = backend(fake_server, price_per_mtok_in=1.0, price_per_mtok_out=2.0, price_per_mtok_cached=0.5)
    msgs = [Message("system", "be fast"), Message("user", "write a kernel")]
    out = asyncio.run(b.complete(msgs, SamplingParams(n=2, temperature=0.7, max_tokens=64, seed=3)))

    assert [c.text for c in out] == ["first answer", "second"]
    request = fake_server.requests[0]
    assert request["n"] == 2 and request["max_tokens"] == 64 and request["seed"] == 3
    assert request["messages"][0] == {"role": "system", "content": "be fast"}
    # usage (11 prompt, 4 cached, 3 completion) is split over the samples and sums back
    assert sum(c.prompt_tokens for c in out) == 11
    assert sum(c.completion_tokens for c in out) == 3
    assert sum(c.cached_tokens for c in out) == 4
    assert all(c.model == "fake-model" and c.backend == "openai" and c.request_id == "req-1" for c in out)
    assert all(c.finish_reason == "stop" and c.latency_s > 0 for c in out)
    expected_cost = (7 * 1.0 + 4 * 0.5 + 3 * 2.0) / 1e6
    assert sum(c.cost_usd for c in out) == pytest.approx(expected_cost)

    summary = b.ledger.summary()
    assert summary["calls"] == 1 and summary["samples"] == 2 and summary["errors"] == 0
    assert (summary["prompt_tokens"], summary["completion_tokens"], summary["cached_tokens"]) == (11, 3, 4)
    assert summary["cost_usd"] == pytest.approx(expected_cost)


def test_no_price_means_no_cost(fake_server: FakeOpenAIServer) -> None:
    out = asyncio.run(backend(fake_server).complete("hi"))
    assert out[0].cost_usd is None


def test_rate_limit_is_retried_transparently(fake_server: FakeOpenAIServer) -> None:
    fake_server.queue(Behaviour(status=429, headers=FAST_RETRY))
    b = backend(fake_server)
    out = asyncio.run(b.complete("hi"))
    assert out[0].text == "hello"
    assert len(fake_server.requests) == 2
    assert b.ledger.summary()["calls"] == 1 and b.ledger.summary()["errors"] == 0


def test_server_errors_exhaust_retries(fake_server: FakeOpenAIServer) -> None:
    fake_server.queue(*[Behaviour(status=500, headers=FAST_RETRY)] * 3)
    b = backend(fake_server, max_retries=2)
    with pytest.raises(LLMError, match=r"server error \(500\) after 3 tries") as info:
        asyncio.run(b.complete("hi"))
    assert info.value.status == 500
    assert len(fake_server.requests) == 3
    assert b.ledger.summary()["errors"] == 1


def test_client_error_is_not_retried(fake_server: FakeOpenAIServer) -> None:
    fake_server.queue(Behaviour(status=400))
    with pytest.raises(LLMError, match=r"rejected the request \(400\)"):
        asyncio.run(backend(fake_server).complete("hi"))
    assert len(fake_server.requests) == 1


def test_auth_error_names_the_variable_not_the_key(
    fake_server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_KEY", "sk-secret-value")
    fake_server.queue(Behaviour(status=401))
    with pytest.raises(LLMError, match=r"\$MY_KEY \(401\)") as info:
        asyncio.run(backend(fake_server, api_key_env="MY_KEY").complete("hi"))
    assert "sk-secret-value" not in str(info.value)
    assert fake_server.headers[0]["authorization"] == "Bearer sk-secret-value"


def test_missing_key_sends_placeholder(fake_server: FakeOpenAIServer) -> None:
    asyncio.run(backend(fake_server, api_key_env="CUDAL1_UNSET_KEY").complete("hi"))
    assert fake_server.headers[0]["authorization"] == "Bearer EMPTY"


def test_dead_endpoint_fails_fast_with_clear_message(closed_port_url: str) -> None:
    b = create_backend("openai:m", base_url=closed_port_url, max_retries=1, timeout_s=2.0)
    start = time.perf_counter()
    with pytest.raises(LLMError, match=r"unreachable after 2 tries") as info:
        asyncio.run(b.complete("hi"))
    assert closed_port_url in str(info.value)
    assert time.perf_counter() - start < 3.0
    assert b.ledger.summary()["errors"] == 1


def test_hanging_server_times_out(fake_server: FakeOpenAIServer) -> None:
    fake_server.queue(Behaviour(hang=True))
    b = backend(fake_server, timeout_s=0.3, max_retries=0)
    start = time.perf_counter()
    with pytest.raises(LLMError, match=r"timed out \(timeout_s=0.3 per attempt, 1 try\)"):
        asyncio.run(b.complete("hi"))
    assert time.perf_counter() - start < 2.0


def test_whole_call_timeout_covers_retries(fake_server: FakeOpenAIServer) -> None:
    fake_server.queue(*[Behaviour(hang=True)] * 5)
    b = backend(fake_server, timeout_s=5.0, max_retries=4, call_timeout_s=0.3)
    start = time.perf_counter()
    with pytest.raises(LLMError, match="exceeded call_timeout_s=0.3"):
        asyncio.run(b.complete("hi"))
    assert time.perf_counter() - start < 2.0


def test_malformed_json_is_an_llm_error(fake_server: FakeOpenAIServer) -> None:
    fake_server.queue(Behaviour(malformed=True))
    with pytest.raises(LLMError, match="malformed JSON"):
        asyncio.run(backend(fake_server).complete("hi"))


def test_response_without_choices_is_an_llm_error(fake_server: FakeOpenAIServer) -> None:
    fake_server.queue(Behaviour(body={"id": "x", "object": "chat.completion", "model": "m", "choices": []}))
    with pytest.raises(LLMError, match="no choices"):
        asyncio.run(backend(fake_server).complete("hi"))


def test_concurrency_limit_is_honoured(fake_server: FakeOpenAIServer) -> None:
    fake_server.delay_s = 0.1
    b = backend(fake_server, max_concurrency=2)

    async def many() -> list:
        return await asyncio.gather(*(b.complete(f"prompt {i}") for i in range(6)))

    results = asyncio.run(many())
    assert len(results) == 6
    assert fake_server.max_in_flight == 2
    assert b.ledger.summary()["calls"] == 6


def test_extra_body_and_stop_reach_the_server(fake_server: FakeOpenAIServer) -> None:
    b = backend(fake_server, extra_body={"top_k": 20, "repetition_penalty": 1.05})
    asyncio.run(b.complete("hi", SamplingParams(stop=("```",))))
    request = fake_server.requests[0]
    assert request["top_k"] == 20 and request["repetition_penalty"] == 1.05
    assert request["stop"] == ["```"]


def test_max_completion_tokens_field(fake_server: FakeOpenAIServer) -> None:
    asyncio.run(backend(fake_server, max_tokens_field="max_completion_tokens").complete("hi"))
    assert fake_server.requests[0]["max_completion_tokens"] == 4096
    assert "max_tokens" not in fake_server.requests[0]


def test_inline_think_block_is_stripped(fake_server: FakeOpenAIServer) -> None:
    fake_server.replies = ["<think>compare the variants</think>\n\nfinal code"]
    out = asyncio.run(backend(fake_server).complete("hi"))
    assert out[0].text == "final code"
    assert out[0].reasoning == "compare the variants"


def test_reasoning_content_field_is_kept(fake_server: FakeOpenAIServer) -> None:
    fake_server.message_extra = {"reasoning_content": "server-parsed thoughts"}
    out = asyncio.run(backend(fake_server).complete("hi"))
    assert out[0].text == "hello"
    assert out[0].reasoning == "server-parsed thoughts"


def test_ledger_jsonl_written(fake_server: FakeOpenAIServer, closed_port_url: str, tmp_path) -> None:
    ledger = Ledger(tmp_path / "run" / "llm_calls.jsonl")
    ok = create_backend(
        "openai:a", base_url=fake_server.url, ledger=ledger, price_per_mtok_in=1, price_per_mtok_out=1
    )
    dead = create_backend("openai:b", base_url=closed_port_url, ledger=ledger, max_retries=0)
    asyncio.run(ok.complete("hi", SamplingParams(n=2)))
    with pytest.raises(LLMError):
        asyncio.run(dead.complete("hi"))

    records = [json.loads(line) for line in ledger.path.read_text().splitlines()]
    assert len(records) == 2
    good, bad = records
    assert good["model"] == "a" and good["base_url"] == fake_server.url and good["n"] == 2
    assert good["request_id"] == "req-1" and good["prompt_tokens"] == 11 and good["error"] is None
    assert good["finish_reasons"] == ["stop", "stop"] and good["cost_usd"] > 0 and good["latency_s"] > 0
    assert bad["base_url"] == closed_port_url and "unreachable" in bad["error"]
    assert ledger.summary()["calls"] == 2 and ledger.summary()["errors"] == 1


def test_backend_survives_several_event_loops(fake_server: FakeOpenAIServer) -> None:
    """CLI commands and tests call asyncio.run more than once with the same backend."""
    b = backend(fake_server, max_concurrency=1)

    async def two() -> None:
        await asyncio.gather(b.complete("a"), b.complete("b"))
        await b.aclose()

    asyncio.run(two())
    asyncio.run(two())
    assert b.ledger.summary()["calls"] == 4


def test_base_url_from_environment(monkeypatch: pytest.MonkeyPatch, fake_server: FakeOpenAIServer) -> None:
    monkeypatch.setenv("MY_BASE", fake_server.url + "/")
    b = create_backend("openai:m", base_url_env="MY_BASE")
    assert b.endpoint == fake_server.url
    assert create_backend("openai:m").endpoint == "https://api.openai.com/v1"
