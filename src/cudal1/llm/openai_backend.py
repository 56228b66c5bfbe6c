"""Any OpenAI-compatible chat endpoint (vLLM, SGLang, hosted APIs) through the official SDK.

Transient failures (connection errors, 408/409/429, 5xx) are retried by the SDK with exponential
backoff (0.5 s doubling to 8 s, with jitter; a server's Retry-After is honoured up to 2 min), so a
busy server costs time, not samples. ``timeout_s`` limits each HTTP attempt; the base class's
``call_timeout_s`` limits the whole call. Everything else becomes an ``LLMError`` that says which
endpoint failed and how. The key is read from the environment variable named by ``api_key_env``,
never stored; local servers need none ("EMPTY" is sent).

Server-specific sampling parameters (vLLM/SGLang ``top_k``, ``min_p``, ``repetition_penalty``,
structured outputs) go in ``extra_body``. Reasoning comes back either in
``message.reasoning_content`` / ``message.reasoning`` (vLLM and SGLang reasoning parsers,
DeepSeek) or inline as ``<think>...</think>``; both end up in ``Completion.reasoning``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import weakref
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import openai
from pydantic import Field

from cudal1.llm.base import (
    BackendOptions,
    Completion,
    Ledger,
    LLMBackend,
    LLMError,
    Message,
    SamplingParams,
    cost_usd,
    split_evenly,
    split_reasoning,
)

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIOptions(BackendOptions):
    base_url: str | None = Field(None, description="endpoint; None: $base_url_env, else api.openai.com")
    base_url_env: str = Field("OPENAI_BASE_URL", description="environment variable naming the endpoint")
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the key")
    timeout_s: float = Field(600.0, gt=0, description="limit on each HTTP attempt")
    max_retries: int = Field(5, ge=0, description="SDK retries with backoff (connection, 408/409/429, 5xx)")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="extra request fields (vLLM/SGLang)")
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = Field(
        "max_tokens", description="OpenAI's reasoning models accept only max_completion_tokens"
    )
    price_per_mtok_in: float | None = Field(None, ge=0, description="USD per million prompt tokens")
    price_per_mtok_out: float | None = Field(None, ge=0, description="USD per million completion tokens")
    price_per_mtok_cached: float | None = Field(
        None, ge=0, description="USD per million cached prompt tokens (default: the prompt price)"
    )


class OpenAIBackend(LLMBackend):
    """``openai:MODEL``: chat completions from an OpenAI-compatible server."""

    name = "openai"
    Options: ClassVar[type[OpenAIOptions]] = OpenAIOptions

    def __init__(
        self, model: str, options: OpenAIOptions | None = None, *, ledger: Ledger | None = None
    ) -> None:
        opts = options if options is not None else OpenAIOptions()
        super().__init__(
            model, max_concurrency=opts.max_concurrency, call_timeout_s=opts.call_timeout_s, ledger=ledger
        )
        self.options = opts
        self.base_url = (opts.base_url or os.environ.get(opts.base_url_env) or DEFAULT_BASE_URL).rstrip("/")
        self.prices = (opts.price_per_mtok_in, opts.price_per_mtok_out, opts.price_per_mtok_cached)
        # The SDK's connection pool belongs to the event loop that opened it.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, openai.AsyncOpenAI] = (
            weakref.WeakKeyDictionary()
        )

    @classmethod
    def from_options(
        cls, target: str, options: BackendOptions, *, ledger: Ledger | None = None
    ) -> OpenAIBackend:
        """``create_backend``'s way in: the options come validated by ``OpenAIOptions``."""
        if not isinstance(options, OpenAIOptions):
            raise TypeError(f"openai backend needs OpenAIOptions, got {type(options).__name__}")
        return cls(target, options, ledger=ledger)

    @property
    def endpoint(self) -> str:
        return self.base_url

    def _client(self) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            key = os.environ.get(self.options.api_key_env)
            if not key and self.base_url == DEFAULT_BASE_URL:
                log.warning(
                    "$%s is not set; %s will refuse the calls", self.options.api_key_env, self.base_url
                )
            client = openai.AsyncOpenAI(
                base_url=self.base_url,
                api_key=key or "EMPTY",
                timeout=self.options.timeout_s,
                max_retries=self.options.max_retries,
            )
            self._clients[loop] = client
        return client

    async def aclose(self) -> None:
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.close()

    def _request(self, messages: Sequence[Message], params: SamplingParams) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "temperature": params.temperature,
            "top_p": params.top_p,
            self.options.max_tokens_field: params.max_tokens,
            "n": params.n,
        }
        if params.stop:
            request["stop"] = list(params.stop)
        if params.seed is not None:
            request["seed"] = params.seed
        return request

    async def _complete(self, messages: Sequence[Message], params: SamplingParams) -> list[Completion]:
        request = self._request(messages, params)
        try:
            response = await self._client().chat.completions.create(
                **request, extra_body=self.options.extra_body or None
            )
        except openai.APIError as exc:
            raise self._error(exc) from exc
        except ValueError as exc:  # the body was not JSON
            raise LLMError(f"endpoint {self.base_url} returned malformed JSON: {exc}") from exc
        if not getattr(response, "choices", None):
            raise LLMError(f"endpoint {self.base_url} returned no choices: {str(response)[:200]}")
        return self._completions(response)

    def _completions(self, response: Any) -> list[Completion]:
        n = len(response.choices)
        usage = response.usage
        if usage is None:
            log.debug("endpoint %s reported no usage; tokens count as 0", self.base_url)
        prompt = split_evenly(getattr(usage, "prompt_tokens", 0) or 0, n)
        completion = split_evenly(getattr(usage, "completion_tokens", 0) or 0, n)
        cached = split_evenly(_cached_tokens(usage), n)
        request_id = getattr(response, "_request_id", None) or response.id
        out = []
        for i, choice in enumerate(response.choices):
            reasoning, text = _reasoning_and_text(choice.message)
            out.append(
                Completion(
                    text=text,
                    finish_reason=choice.finish_reason or "unknown",
                    prompt_tokens=prompt[i],
                    completion_tokens=completion[i],
                    cached_tokens=cached[i],
                    model=response.model or self.model,
                    backend=self.name,
                    request_id=request_id,
                    cost_usd=cost_usd(prompt[i], completion[i], cached[i], *self.prices),
                    reasoning=reasoning,
                )
            )
        return out

    def _error(self, exc: openai.APIError) -> LLMError:
        """An SDK error as a message that says where, what, and (for auth) which variable to check."""
        url = self.base_url
        retries = self.options.max_retries
        tries = f"{retries + 1} {'try' if retries == 0 else 'tries'}"
        status = getattr(exc, "status_code", None)
        message = getattr(exc, "message", str(exc))
        if isinstance(exc, openai.APITimeoutError):
            text = f"endpoint {url} timed out (timeout_s={self.options.timeout_s} per attempt, {tries})"
        elif isinstance(exc, openai.APIConnectionError):
            text = f"endpoint {url} unreachable after {tries}: {_connect_failure(exc)}"
        elif isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
            env = self.options.api_key_env
            unset = "" if os.environ.get(env) else f"; ${env} is not set"
            text = f"endpoint {url} refused the key from ${env} ({status}{unset}): {message}"
        elif isinstance(exc, openai.NotFoundError):
            text = f"endpoint {url} has no model {self.model!r} or no chat route (404): {message}"
        elif isinstance(exc, openai.RateLimitError):
            text = f"endpoint {url} still rate-limiting (429) after {tries}: {message}"
        elif isinstance(exc, openai.APIStatusError) and exc.status_code >= 500:
            text = f"endpoint {url} server error ({status}) after {tries}: {message}"
        elif isinstance(exc, openai.APIStatusError):
            text = f"endpoint {url} rejected the request ({status}): {message}"
        else:
            text = f"endpoint {url} returned an unusable response: {message}"
        return LLMError(text, status=status)


def _connect_failure(exc: BaseException) -> str:
    """The transport's message plus the OS error under it (e.g. connection refused, DNS failure)."""
    chain = [exc]
    while (nxt := chain[-1].__cause__ or chain[-1].__context__) is not None and len(chain) < 10:
        chain.append(nxt)
    outer, root = chain[min(1, len(chain) - 1)], chain[-1]
    return str(outer) if str(root) == str(outer) else f"{outer} ({type(root).__name__}: {root})"


def _cached_tokens(usage: Any) -> int:
    """Prompt tokens served from the server's prefix cache (OpenAI/vLLM field, else DeepSeek's)."""
    if usage is None:
        return 0
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None)
    if cached is None:
        cached = (usage.model_extra or {}).get("prompt_cache_hit_tokens")
    return int(cached or 0)


def _reasoning_and_text(message: Any) -> tuple[str | None, str]:
    extra = message.model_extra or {}
    field = extra.get("reasoning_content") or extra.get("reasoning")
    inline, text = split_reasoning(message.content or "")
    parts = [p for p in (field, inline) if p]
    return ("\n\n".join(parts) if parts else None), text
