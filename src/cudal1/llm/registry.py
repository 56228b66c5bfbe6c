"""Backends by name: ``create_backend("openai:MODEL", max_concurrency=16)``.

Built-in backends register the same way a plugin would, by import path, so that optional
dependencies (``openai``, ``transformers``) are imported only when that backend is asked for.
Options are validated by the backend's pydantic ``Options`` model (``extra="forbid"``): a typo in
a config file is an error that names the known options, not a silently ignored key.
"""

from __future__ import annotations

import importlib
from typing import Any

from pydantic import ValidationError

from cudal1.config import validation_problems
from cudal1.llm.base import Ledger, LLMBackend

# prefix -> (import path "module:Class" or a class, what follows the colon in a spec, pip extra)
_BACKENDS: dict[str, tuple[str | type[LLMBackend], str, str | None]] = {
    "openai": ("cudal1.llm.openai_backend:OpenAIBackend", "MODEL", "llm"),
    "hf": ("cudal1.llm.hf_backend:HFBackend", "PATH", "hf"),
    "scripted": ("cudal1.llm.scripted:ScriptedBackend", "PATH_OR_NAME", None),
}


def register_backend(prefix: str, backend: str | type[LLMBackend], target: str = "TARGET") -> None:
    """Make ``prefix:TARGET`` specs build ``backend`` (a class, or "module:Class" to import lazily)."""
    if not prefix.isidentifier():
        raise ValueError(f"backend prefix {prefix!r} must be an identifier")
    _BACKENDS[prefix] = (backend, target, None)


def known_backends() -> list[str]:
    """Spec forms accepted by ``create_backend``, e.g. ``["openai:MODEL", "hf:PATH", ...]``."""
    return [f"{prefix}:{target}" for prefix, (_, target, _) in _BACKENDS.items()]


def backend_class(prefix: str) -> type[LLMBackend]:
    """The class registered for ``prefix``, importing it on first use."""
    if prefix not in _BACKENDS:
        raise ValueError(f"unknown LLM backend {prefix!r}; known: {', '.join(known_backends())}")
    entry, target, extra = _BACKENDS[prefix]
    if not isinstance(entry, str):
        return entry
    module_name, _, class_name = entry.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f" (pip install 'cudal1[{extra}]')" if extra else ""
        raise ImportError(f"LLM backend {prefix!r} needs {exc.name}{hint}") from exc
    cls = getattr(module, class_name)
    _BACKENDS[prefix] = (cls, target, extra)
    return cls


def create_backend(spec: str, *, ledger: Ledger | None = None, **options: Any) -> LLMBackend:
    """Build a backend from ``PREFIX:TARGET`` and its options; all calls are counted in ``ledger``."""
    prefix, sep, target = spec.partition(":")
    if not (prefix and sep and target):
        raise ValueError(f"LLM spec {spec!r}: expected one of {', '.join(known_backends())}")
    cls = backend_class(prefix)
    try:
        opts = cls.Options.model_validate(options)
    except ValidationError as exc:
        problems = "; ".join(validation_problems(cls.Options, exc))
        raise ValueError(f"invalid options for LLM backend {prefix!r}: {problems}") from None
    return cls.from_options(target, opts, ledger=ledger)
