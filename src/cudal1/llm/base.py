"""The one LLM call path: messages in, completions out, every call counted.

Backends implement a single coroutine, ``_complete`` (n samples for one prompt). Everything that
must be the same for every backend lives in ``LLMBackend.complete``: the concurrency limit, the
whole-call timeout, latency measurement, the budget guard and the ledger record. Retries belong
to the backend, because only it knows which failures are transient (the OpenAI SDK retries
connection errors, 408/409/429 and 5xx with exponential backoff; a local model does not fail that
way). Content failures (no code block, truncated output) are the caller's business: they are
successful calls here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import Field

from cudal1.config import StrictConfig
from cudal1.llm.ledger import CallRecord, Ledger

log = logging.getLogger(__name__)

Role = Literal["system", "user", "assistant"]


class LLMError(RuntimeError):
    """A call that produced no completion, with a message that says where and why.

    ``status`` is the HTTP status when a server answered, None otherwise.
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class BudgetExceeded(LLMError):
    """The ledger's spending cap was reached; no further call is made."""


@dataclass(frozen=True)
class Message:
    role: Role
    content: str


@dataclass(frozen=True)
class SamplingParams:
    """What to sample; ``n`` samples share one prompt (and so one prefill, on servers that cache)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 4096
    n: int = 1
    stop: tuple[str, ...] | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.n < 1 or self.max_tokens < 1:
            raise ValueError(f"n and max_tokens must be >= 1 (n={self.n}, max_tokens={self.max_tokens})")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1 ({self.temperature}, {self.top_p})")
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))


@dataclass(frozen=True)
class Completion:
    """One sample. Token counts and cost are this sample's share of its call.

    A call's usage is reported once for all its n samples; it is split evenly (remainder to the
    first sample) unless the backend knows the exact per-sample count, so that summing over a
    call's completions gives the call's totals, as the ledger records them.
    """

    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    model: str
    backend: str
    cached_tokens: int = 0
    latency_s: float = 0.0
    request_id: str | None = None
    cost_usd: float | None = None
    reasoning: str | None = None


def split_evenly(total: int, n: int) -> list[int]:
    """``total`` split into n integer shares that add up to it (remainder to the first ones)."""
    base, rest = divmod(total, n)
    return [base + (1 if i < rest else 0) for i in range(n)]


def cost_usd(
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int,
    per_mtok_in: float | None,
    per_mtok_out: float | None,
    per_mtok_cached: float | None = None,
) -> float | None:
    """Cost from our own price table (USD per million tokens); None when no price is configured.

    Cached prompt tokens are billed separately by hosted APIs (usually at a discount); without a
    cached price they count at the input price.
    """
    if per_mtok_in is None or per_mtok_out is None:
        return None
    cached_price = per_mtok_in if per_mtok_cached is None else per_mtok_cached
    fresh = max(prompt_tokens - cached_tokens, 0)
    return (fresh * per_mtok_in + cached_tokens * cached_price + completion_tokens * per_mtok_out) / 1e6


_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_LEADING_OPEN = re.compile(r"^\s*<think>")


def split_reasoning(text: str) -> tuple[str | None, str]:
    """Separate a reasoning model's ``<think>...</think>`` block from its answer.

    Chat templates of R1/Qwen3-style models often put ``<think>`` into the prompt, so the output
    may hold only the closing tag. An opening tag with no closing one means the model was cut off
    while thinking: all of it is reasoning and the answer is empty.
    """
    close = text.find(_THINK_CLOSE)
    if close >= 0:
        head = _LEADING_OPEN.sub("", text[:close], count=1)
        return head.strip(), text[close + len(_THINK_CLOSE) :].lstrip()
    if _LEADING_OPEN.match(text):
        return _LEADING_OPEN.sub("", text, count=1).strip(), ""
    return None, text


class BackendOptions(StrictConfig):
    """Options every backend takes. Subclasses add their own; unknown keys are an error."""

    max_concurrency: int = Field(8, ge=1, description="calls in flight at once, per backend")
    call_timeout_s: float | None = Field(
        None, gt=0, description="limit on one whole call (retries included, queueing excluded); None: none"
    )


class LLMBackend(ABC):
    """Base of every backend: subclasses implement ``_complete`` and set ``name``."""

    name: ClassVar[str] = "base"
    Options: ClassVar[type[BackendOptions]] = BackendOptions

    def __init__(
        self,
        model: str,
        *,
        max_concurrency: int = 8,
        call_timeout_s: float | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        self.model = model
        self.max_concurrency = max_concurrency
        self.call_timeout_s = call_timeout_s
        self.ledger = ledger if ledger is not None else Ledger()
        # A semaphore belongs to one event loop; callers may run several loops in turn
        # (asyncio.run per CLI command or test), so keep one per loop.
        self._semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    @classmethod
    def from_options(
        cls, target: str, options: BackendOptions, *, ledger: Ledger | None = None
    ) -> LLMBackend:
        """Build from a spec's target (what follows ``prefix:``) and validated options."""
        return cls(target, ledger=ledger, **options.model_dump())

    @property
    def endpoint(self) -> str | None:
        """Where calls go (a URL for remote backends), for the ledger and error messages."""
        return None

    @abstractmethod
    async def _complete(self, messages: Sequence[Message], params: SamplingParams) -> list[Completion]:
        """Return ``params.n`` completions for one prompt, or raise LLMError."""

    async def complete(
        self, messages: Sequence[Message] | str, params: SamplingParams | None = None
    ) -> list[Completion]:
        """Sample ``params.n`` completions; a bare string is one user message."""
        msgs = [Message("user", messages)] if isinstance(messages, str) else list(messages)
        params = params or SamplingParams()
        async with self._semaphore():
            # Checked after queueing: calls that waited for a slot must not overspend either.
            if self.ledger.over_budget():
                raise BudgetExceeded(f"LLM budget of ${self.ledger.budget_usd:.2f} spent; no further calls")
            start = time.perf_counter()
            try:
                async with asyncio.timeout(self.call_timeout_s):
                    completions = await self._complete(msgs, params)
            except (LLMError, TimeoutError) as exc:
                err = self._as_error(exc, time.perf_counter() - start)
                self._record_failure(params.n, start, err)
                raise err from exc
            except Exception as exc:  # a bug, not a failed call: counted, then raised unchanged
                self._record_failure(params.n, start, exc)
                raise
            latency = time.perf_counter() - start
        completions = [dataclasses.replace(c, latency_s=latency) for c in completions]
        self.ledger.record(self._record(params.n, completions, latency))
        return completions

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        sem = self._semaphores.get(loop)
        if sem is None:
            sem = self._semaphores[loop] = asyncio.Semaphore(self.max_concurrency)
        return sem

    def _as_error(self, exc: BaseException, latency: float) -> LLMError:
        if isinstance(exc, LLMError):
            return exc
        where = self.endpoint or self.model
        if self.call_timeout_s is None:
            return LLMError(f"{self.name} call to {where} timed out after {latency:.1f} s: {exc}")
        return LLMError(
            f"{self.name} call to {where} exceeded call_timeout_s={self.call_timeout_s} "
            f"(gave up after {latency:.1f} s)"
        )

    def _record_failure(self, n: int, start: float, exc: BaseException) -> None:
        latency = time.perf_counter() - start
        self.ledger.record(self._record(n, [], latency, error=f"{type(exc).__name__}: {exc}"))
        log.warning("%s call failed: %s", self.name, exc)

    def _record(
        self, n: int, completions: list[Completion], latency: float, error: str | None = None
    ) -> CallRecord:
        costs = [c.cost_usd for c in completions]
        return CallRecord(
            ts=time.time(),
            backend=self.name,
            model=completions[0].model if completions else self.model,
            base_url=self.endpoint,
            request_id=completions[0].request_id if completions else None,
            n=n,
            prompt_tokens=sum(c.prompt_tokens for c in completions),
            completion_tokens=sum(c.completion_tokens for c in completions),
            cached_tokens=sum(c.cached_tokens for c in completions),
            latency_s=latency,
            finish_reasons=tuple(c.finish_reason for c in completions),
            cost_usd=None if not costs or None in costs else sum(c for c in costs if c is not None),
            error=error,
        )

    async def aclose(self) -> None:
        """Release connections or memory held for the running loop; the backend stays usable."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, endpoint={self.endpoint!r})"
