"""A backend that answers from a script: for tests, dry runs and reproducing a search offline.

Replies come from a list of strings (cycled), a callable ``(messages, params) -> str``, a YAML or
JSON file holding a list of strings (or ``{"replies": [...]}``), or a built-in script by name
(``echo``: the last user message back). Each of the n samples of a call takes the next reply.

It goes through the same ``LLMBackend.complete`` path as the real backends (concurrency limit,
timeout, ledger), applies ``max_tokens`` and ``stop`` the way a server would, strips
``<think>`` blocks, and can inject failures and latency so that callers' error handling is
tested too. Token counts are whitespace-separated words: an approximation, but a stable one.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import yaml
from pydantic import Field

from cudal1.llm.base import (
    BackendOptions,
    Completion,
    Ledger,
    LLMBackend,
    LLMError,
    Message,
    SamplingParams,
    split_evenly,
    split_reasoning,
)

ReplyFn = Callable[[Sequence[Message], SamplingParams], str]


def _echo(messages: Sequence[Message], params: SamplingParams) -> str:
    return next((m.content for m in reversed(messages) if m.role == "user"), "")


BUILTIN_SCRIPTS: dict[str, ReplyFn] = {"echo": _echo}


class ScriptedOptions(BackendOptions):
    fail_on: tuple[int, ...] = Field((), description="1-based call numbers that raise LLMError")
    latency_s: float = Field(0.0, ge=0, description="simulated time per call")


def load_replies(path: str | Path) -> list[str]:
    """Replies from a YAML/JSON file: a list of strings, or a mapping with a ``replies`` list."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, dict):
        data = data.get("replies")
    if not isinstance(data, list) or not data or not all(isinstance(r, str) for r in data):
        raise ValueError(f"{path}: expected a non-empty list of strings (or a mapping with 'replies')")
    return data


def _words(text: str) -> list[re.Match[str]]:
    return list(re.finditer(r"\S+", text))


def _apply_limits(text: str, params: SamplingParams) -> tuple[str, str]:
    """Cut at the first stop string, then at ``max_tokens`` words, as a server would."""
    for stop in params.stop or ():
        cut = text.find(stop)
        if cut >= 0:
            text = text[:cut]
    words = _words(text)
    if len(words) > params.max_tokens:
        return text[: words[params.max_tokens - 1].end()], "length"
    return text, "stop"


class ScriptedBackend(LLMBackend):
    """Replies from a script; records every prompt it receives (``prompts``, ``params``)."""

    name = "scripted"
    Options = ScriptedOptions

    def __init__(
        self,
        replies: str | Path | Sequence[str] | ReplyFn = "echo",
        *,
        fail_on: Sequence[int] = (),
        latency_s: float = 0.0,
        max_concurrency: int = 8,
        call_timeout_s: float | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        label, self._next_reply = self._script(replies)
        super().__init__(
            f"scripted:{label}", max_concurrency=max_concurrency, call_timeout_s=call_timeout_s, ledger=ledger
        )
        self.fail_on = frozenset(fail_on)
        self.latency_s = latency_s
        self.calls = 0
        self.prompts: list[list[Message]] = []
        self.params: list[SamplingParams] = []
        self._lock = threading.Lock()

    @staticmethod
    def _script(replies: str | Path | Sequence[str] | ReplyFn) -> tuple[str, ReplyFn]:
        if callable(replies):
            return getattr(replies, "__name__", "callable"), replies
        if isinstance(replies, str) and replies in BUILTIN_SCRIPTS:
            return replies, BUILTIN_SCRIPTS[replies]
        if isinstance(replies, str | Path):
            if not Path(replies).is_file():
                known = ", ".join(BUILTIN_SCRIPTS)
                raise ValueError(f"scripted:{replies}: no such file, and not a built-in script ({known})")
            label, items = Path(replies).name, load_replies(replies)
        else:
            label, items = "list", list(replies)
        if not items:
            raise ValueError("scripted backend needs at least one reply")
        cycle: Iterator[str] = itertools.cycle(items)
        return label, lambda messages, params: next(cycle)

    async def _complete(self, messages: Sequence[Message], params: SamplingParams) -> list[Completion]:
        with self._lock:
            self.calls += 1
            call = self.calls
            self.prompts.append(list(messages))
            self.params.append(params)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if call in self.fail_on:
            raise LLMError(f"scripted failure injected on call {call}")
        with self._lock:  # a cycling script must hand out consecutive replies to one call
            raw = [self._next_reply(messages, params) for _ in range(params.n)]
        prompt_words = sum(len(_words(m.content)) for m in messages)
        return [
            self._completion(text, share, params)
            for text, share in zip(raw, split_evenly(prompt_words, params.n), strict=True)
        ]

    def _completion(self, raw: str, prompt_tokens: int, params: SamplingParams) -> Completion:
        text, finish = _apply_limits(raw, params)
        reasoning, answer = split_reasoning(text)
        return Completion(
            text=answer,
            finish_reason=finish,
            prompt_tokens=prompt_tokens,
            completion_tokens=len(_words(text)),
            model=self.model,
            backend=self.name,
            reasoning=reasoning,
        )
