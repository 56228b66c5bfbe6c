"""``hf:PATH``: a local transformers model, for machines with a GPU and no server.

The model and tokenizer load from a local directory only (``local_files_only=True``): nothing is
ever downloaded. ``PATH`` is a plain model or a LoRA adapter directory (``llm.model_dir``: the base
it names is loaded, the adapter merged in). Building the backend reads only what the directory
holds, so a missing model or base fails then; the weights load at the first call. Generation
runs in a worker thread (``asyncio.to_thread``) so the event loop keeps serving other work, and
one lock serialises generations: they share one model and torch's global RNG (``seed``).

What is not covered: prompts of concurrent calls are not batched together (use a vLLM/SGLang
server through ``openai:`` for throughput); ``call_timeout_s`` stops waiting for a generation but
cannot stop the thread, which finishes its ``generate`` in the background.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from cudal1.config import Device
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
from cudal1.llm.model_dir import load_causal_lm, load_tokenizer, read_model_dir

log = logging.getLogger(__name__)

Dtype = Literal["auto", "float32", "bfloat16", "float16"]


class HFOptions(BackendOptions):
    max_concurrency: int = Field(1, ge=1, description="calls admitted at once (generation is serialised)")
    device: Device = Field("auto", description="auto (first CUDA GPU, else CPU) | cpu | cuda | cuda:N")
    dtype: Dtype = Field("auto", description="weights dtype; auto: as saved in the model's config")


class HFBackend(LLMBackend):
    """Sampling from a local ``AutoModelForCausalLM`` checkpoint."""

    name = "hf"
    Options: ClassVar[type[HFOptions]] = HFOptions

    def __init__(
        self, path: str | Path, options: HFOptions | None = None, *, ledger: Ledger | None = None
    ) -> None:
        opts = options if options is not None else HFOptions()
        path = Path(path).expanduser()
        self.model_dir = read_model_dir(path)  # a ModelDirError (ValueError) names what is missing
        super().__init__(
            str(path), max_concurrency=opts.max_concurrency, call_timeout_s=opts.call_timeout_s, ledger=ledger
        )
        self.path, self.device, self.dtype = path, opts.device, opts.dtype
        self._model: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    @classmethod
    def from_options(cls, target: str, options: BackendOptions, *, ledger: Ledger | None = None) -> HFBackend:
        """``create_backend``'s way in: the options come validated by ``HFOptions``."""
        if not isinstance(options, HFOptions):
            raise TypeError(f"hf backend needs HFOptions, got {type(options).__name__}")
        return cls(target, options, ledger=ledger)

    @property
    def endpoint(self) -> str:
        return f"local:{self.path}"

    def _load(self) -> None:
        """Load model and tokenizer once (caller holds the lock)."""
        if self._model is not None:
            return
        import torch

        device = self.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        dtype = self.dtype if self.dtype == "auto" else getattr(torch, self.dtype)
        over = "" if self.model_dir.adapter is None else f" (a LoRA adapter over {self.model_dir.base})"
        log.info("loading %s%s on %s (dtype %s)", self.path, over, device, self.dtype)
        try:
            self._tokenizer = load_tokenizer(self.model_dir)
            model: Any = load_causal_lm(self.model_dir, dtype=dtype)
        except (OSError, ValueError) as exc:  # ModelDirError included
            raise LLMError(f"cannot load model from {self.path}: {exc}") from exc
        self._model = model.to(device).eval()

    def _prompt_ids(self, messages: Sequence[Message]) -> Any:
        tok = self._tokenizer
        if tok.chat_template:
            chat = [{"role": m.role, "content": m.content} for m in messages]
            text = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        else:  # a base model: a plain transcript the model can continue
            text = "".join(f"{m.role.capitalize()}: {m.content}\n\n" for m in messages) + "Assistant:"
        return tok(text, return_tensors="pt", add_special_tokens=False)["input_ids"]

    def _generate(
        self, messages: Sequence[Message], params: SamplingParams
    ) -> tuple[list[tuple[str, str, int]], int]:
        """Blocking generation: (text, finish_reason, completion tokens) per sample, and prompt length."""
        import torch

        with self._lock:
            self._load()
            ids = self._prompt_ids(messages).to(self._model.device)
            sample = params.temperature > 0
            if params.seed is not None:
                torch.manual_seed(params.seed)
            kwargs: dict[str, Any] = {"do_sample": sample, "max_new_tokens": params.max_tokens}
            if sample:
                kwargs.update(temperature=params.temperature, top_p=params.top_p)
            if params.stop:
                kwargs.update(stop_strings=list(params.stop), tokenizer=self._tokenizer)
            # Greedy decoding gives n identical samples: decode once, copy.
            copies = 1 if not sample else params.n
            with torch.inference_mode():
                out = self._model.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    num_return_sequences=copies,
                    pad_token_id=self._pad_id(),
                    **kwargs,
                )
            samples = [self._decode(row[ids.shape[1] :].tolist(), params) for row in out]
        return samples * (params.n // len(samples)), int(ids.shape[1])

    def _pad_id(self) -> int | None:
        tok = self._tokenizer
        return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    def _eos_ids(self) -> set[int]:
        eos = self._model.generation_config.eos_token_id
        if eos is None:
            eos = self._tokenizer.eos_token_id
        return set(eos) if isinstance(eos, list) else ({eos} if eos is not None else set())

    def _decode(self, new_ids: list[int], params: SamplingParams) -> tuple[str, str, int]:
        eos = self._eos_ids()
        end = next((i + 1 for i, t in enumerate(new_ids) if t in eos), None)
        used = new_ids if end is None else new_ids[:end]
        text = self._tokenizer.decode(used, skip_special_tokens=True)
        finish = "stop" if end is not None else "length"
        for stop in params.stop or ():
            cut = text.find(stop)
            if cut >= 0:  # servers drop the stop string; generate() keeps it
                text, finish = text[:cut], "stop"
        if finish == "length" and len(used) < params.max_tokens:
            finish = "stop"  # ended early without EOS: a stop-string criterion ended it
        return text, finish, len(used)

    async def _complete(self, messages: Sequence[Message], params: SamplingParams) -> list[Completion]:
        try:
            samples, prompt_len = await asyncio.to_thread(self._generate, messages, params)
        except LLMError:
            raise
        except RuntimeError as exc:  # torch's errors, CUDA out-of-memory included
            raise LLMError(f"generation with {self.path} failed: {exc}") from exc
        prompt = split_evenly(prompt_len, params.n)
        out = []
        for (raw, finish, n_tokens), prompt_share in zip(samples, prompt, strict=True):
            reasoning, text = split_reasoning(raw)
            out.append(
                Completion(
                    text=text,
                    finish_reason=finish,
                    prompt_tokens=prompt_share,
                    completion_tokens=n_tokens,
                    model=self.path.name,
                    backend=self.name,
                    reasoning=reasoning,
                )
            )
        return out

    async def aclose(self) -> None:
        """Drop the model so its memory can be freed; the next call loads it again."""
        await asyncio.to_thread(self._unload)

    def _unload(self) -> None:
        with self._lock:
            self._model = self._tokenizer = None
