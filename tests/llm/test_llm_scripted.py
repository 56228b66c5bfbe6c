"""The scripted backend, and through it the behaviour every backend shares (LLMBackend.complete)."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from cudal1.llm import (
    BudgetExceeded,
    CallRecord,
    Ledger,
    LLMError,
    Message,
    SamplingParams,
    ScriptedBackend,
    create_backend,
    split_reasoning,
)
from cudal1.llm.base import cost_usd, split_evenly


def run(backend: ScriptedBackend, prompt: str = "hi", **params) -> list[str]:
    return [c.text for c in asyncio.run(backend.complete(prompt, SamplingParams(**params)))]


def test_replies_cycle_across_calls_and_samples() -> None:
    b = ScriptedBackend(["a", "b", "c"])
    assert run(b) == ["a"]
    assert run(b, n=3) == ["b", "c", "a"]
    assert b.ledger.summary()["samples"] == 4


def test_prompts_and_params_are_recorded() -> None:
    b = ScriptedBackend(["ok"])
    msgs = [Message("system", "sys"), Message("user", "task one")]
    asyncio.run(b.complete(msgs, SamplingParams(temperature=0.2)))
    assert b.calls == 1 and b.prompts == [msgs]
    assert b.params[0].temperature == 0.2


def test_callable_script_sees_the_messages() -> None:
    b = ScriptedBackend(lambda messages, params: f"{len(messages)}:{messages[-1].content}:{params.n}")
    assert run(b, "task", n=2) == ["1:task:2", "1:task:2"]


def test_builtin_echo_and_token_counts() -> None:
    out = asyncio.run(create_backend("scripted:echo").complete("one two three"))
    assert out[0].text == "one two three"
    assert (out[0].prompt_tokens, out[0].completion_tokens) == (3, 3)
    assert out[0].model == "scripted:echo" and out[0].backend == "scripted"


@pytest.mark.parametrize("suffix", ["yaml", "json"])
def test_replies_from_file(tmp_path, suffix: str) -> None:
    path = tmp_path / f"replies.{suffix}"
    path.write_text(json.dumps({"replies": ["x", "y"]}) if suffix == "json" else "- x\n- |\n  y\n")
    b = create_backend(f"scripted:{path}")
    assert [t.strip() for t in run(b, n=3)] == ["x", "y", "x"]


def test_bad_reply_file_and_missing_script(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("just: a mapping\n")
    with pytest.raises(ValueError, match="list of strings"):
        create_backend(f"scripted:{bad}")
    with pytest.raises(ValueError, match="not a built-in script"):
        create_backend(f"scripted:{tmp_path / 'missing.yaml'}")


def test_failure_injection_on_chosen_calls() -> None:
    b = create_backend("scripted:echo", fail_on=[2])
    assert run(b, "first") == ["first"]
    with pytest.raises(LLMError, match="injected on call 2"):
        run(b, "second")
    assert run(b, "third") == ["third"]
    summary = b.ledger.summary()
    assert summary["calls"] == 3 and summary["errors"] == 1 and summary["samples"] == 2


def test_latency_and_call_timeout() -> None:
    slow = ScriptedBackend(["x"], latency_s=5.0, call_timeout_s=0.1)
    start = time.perf_counter()
    with pytest.raises(LLMError, match="exceeded call_timeout_s=0.1"):
        run(slow)
    assert time.perf_counter() - start < 1.0
    assert slow.ledger.summary()["errors"] == 1


def test_concurrency_limit() -> None:
    b = ScriptedBackend(["x"], latency_s=0.05, max_concurrency=3)
    active = peak = 0
    inner = b._complete

    async def counting(messages, params):
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        try:
            return await inner(messages, params)
        finally:
            active -= 1

    b._complete = counting  # type: ignore[method-assign]

    async def many() -> None:
        await asyncio.gather(*(b.complete(str(i)) for i in range(10)))

    asyncio.run(many())
    assert peak == 3 and b.calls == 10


def test_max_tokens_and_stop_like_a_server() -> None:
    b = ScriptedBackend(["alpha beta\ngamma delta END trailing"])
    out = asyncio.run(b.complete("hi", SamplingParams(max_tokens=3)))
    assert out[0].text == "alpha beta\ngamma" and out[0].finish_reason == "length"
    out = asyncio.run(b.complete("hi", SamplingParams(stop=("END",))))
    assert out[0].text == "alpha beta\ngamma delta " and out[0].finish_reason == "stop"


def test_reasoning_is_split_off() -> None:
    out = asyncio.run(ScriptedBackend(["<think>why</think>answer"]).complete("hi"))
    assert (out[0].reasoning, out[0].text) == ("why", "answer")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("plain answer", (None, "plain answer")),
        ("<think>a\nb</think>\n\ncode", ("a\nb", "code")),
        ("  <think>x</think>y", ("x", "y")),
        ("thinking begun in the prompt</think>answer", ("thinking begun in the prompt", "answer")),
        ("<think>cut off while thinking", ("cut off while thinking", "")),
    ],
)
def test_split_reasoning(raw: str, expected: tuple[str | None, str]) -> None:
    assert split_reasoning(raw) == expected


def test_split_evenly_and_cost() -> None:
    assert split_evenly(7, 3) == [3, 2, 2] and sum(split_evenly(5, 5)) == 5
    assert cost_usd(1_000_000, 0, 0, 2.0, 8.0) == pytest.approx(2.0)
    assert cost_usd(1_000_000, 500_000, 400_000, 2.0, 8.0, 0.5) == pytest.approx(1.2 + 0.2 + 4.0)
    assert cost_usd(10, 10, 0, None, 8.0) is None


def test_sampling_params_validation() -> None:
    assert SamplingParams(stop="```").stop == ("```",)
    for bad in ({"n": 0}, {"max_tokens": 0}, {"temperature": -1}, {"top_p": 0}):
        with pytest.raises(ValueError):
            SamplingParams(**bad)


def record(cost: float | None, error: str | None = None) -> CallRecord:
    return CallRecord(0.0, "scripted", "m", None, None, 1, 10, 5, 0, 0.1, ("stop",), cost, error)


def test_ledger_totals_are_thread_safe(tmp_path) -> None:
    ledger = Ledger(tmp_path / "calls.jsonl")
    threads = [
        threading.Thread(target=lambda: [ledger.record(record(0.001)) for _ in range(50)]) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    summary = ledger.summary()
    assert summary["calls"] == 400 and summary["prompt_tokens"] == 4000
    assert summary["cost_usd"] == pytest.approx(0.4)
    lines = ledger.path.read_text().splitlines()
    assert len(lines) == 400 and all(json.loads(line)["model"] == "m" for line in lines)


def test_budget_guard_stops_calls() -> None:
    ledger = Ledger(budget_usd=0.01)
    b = ScriptedBackend(["x"], ledger=ledger)
    run(b)  # nothing spent yet
    ledger.record(record(0.02))
    with pytest.raises(BudgetExceeded, match="budget"):
        run(b)
    assert b.calls == 1


def test_a_bug_in_a_backend_is_counted_and_raised_unchanged() -> None:
    def broken(messages, params):
        raise KeyError("oops")

    b = ScriptedBackend(broken)
    with pytest.raises(KeyError):
        run(b)
    assert b.ledger.summary()["errors"] == 1
