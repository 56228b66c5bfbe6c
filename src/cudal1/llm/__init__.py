"""Text in, text out: one call path for every LLM the search and the reward checker use.

``create_backend("openai:MODEL" | "hf:PATH" | "scripted:PATH_OR_NAME", **options)`` builds a
backend; ``await backend.complete(messages, SamplingParams(n=4))`` returns completions, and every
call is counted in the backend's ``Ledger``. The OpenAI and transformers backends import their
optional dependencies only when they are created.
"""

from cudal1.llm.base import (
    BackendOptions,
    BudgetExceeded,
    Completion,
    LLMBackend,
    LLMError,
    Message,
    SamplingParams,
    split_reasoning,
)
from cudal1.llm.ledger import CallRecord, Ledger, ledger_totals
from cudal1.llm.registry import backend_class, create_backend, known_backends, register_backend
from cudal1.llm.scripted import ScriptedBackend

__all__ = [
    "BackendOptions",
    "BudgetExceeded",
    "CallRecord",
    "Completion",
    "LLMBackend",
    "LLMError",
    "Ledger",
    "Message",
    "SamplingParams",
    "ScriptedBackend",
    "backend_class",
    "create_backend",
    "known_backends",
    "ledger_totals",
    "register_backend",
    "split_reasoning",
]
