"""A local model directory, as the transformers backend (``hf:PATH``) and the training stages
load it: a plain transformers model (``config.json``), or a LoRA adapter saved by peft
(``adapter_config.json``), whose ``base_model_name_or_path`` names the plain model it adapts.

An adapter directory is what a stage writes with ``lora.save: adapter``: tens of megabytes where
a merged 7B model takes 15 GB. Loading it loads the base, then the adapter on top (merged into
the weights for generation; kept apart when a stage goes on training it). Both come from local
directories only: nothing is ever downloaded. A relative base path is read from the current
directory, as peft reads it, so the stages record absolute ones.

What is not covered: an adapter whose base is itself an adapter (the stages go on training one
adapter instead of stacking them), quantised bases, and a directory holding several adapters
(only the one at its top level is loaded).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODEL_CONFIG, ADAPTER_CONFIG = "config.json", "adapter_config.json"
_TOKENIZER_CONFIG = "tokenizer_config.json"


class ModelDirError(ValueError):
    """A directory that holds no loadable model, or an adapter whose base is not here."""


@dataclass(frozen=True)
class ModelDir:
    """What ``path`` holds: the plain model to load (``base``) and the adapter on top, if any."""

    path: Path
    base: Path
    adapter: Path | None = None

    @property
    def tokenizer_dir(self) -> Path:
        """The adapter's own tokenizer where it was saved with one (the stages do), else the base's."""
        if self.adapter is not None and (self.adapter / _TOKENIZER_CONFIG).is_file():
            return self.adapter
        return self.base


def is_model_dir(path: Path) -> bool:
    """Whether ``path`` holds a saved model or adapter (the check a resumed stage makes)."""
    return (path / MODEL_CONFIG).is_file() or (path / ADAPTER_CONFIG).is_file()


def read_model_dir(path: str | Path) -> ModelDir:
    """What ``path`` holds; a ``ModelDirError`` that says what is missing where, otherwise."""
    path = Path(path).expanduser().resolve()
    if (path / MODEL_CONFIG).is_file():
        return ModelDir(path, path)
    if not (path / ADAPTER_CONFIG).is_file():
        raise ModelDirError(
            f"{path}: not a local model directory (no {MODEL_CONFIG} or {ADAPTER_CONFIG}; "
            "models are never downloaded)"
        )
    try:
        base = json.loads((path / ADAPTER_CONFIG).read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError) as exc:
        raise ModelDirError(f"{path / ADAPTER_CONFIG}: cannot read it: {exc}") from None
    if not base:
        raise ModelDirError(f"{path / ADAPTER_CONFIG} names no base model (base_model_name_or_path)")
    base_dir = Path(base).expanduser().resolve()
    if not (base_dir / MODEL_CONFIG).is_file():
        raise ModelDirError(
            f"{path} is a LoRA adapter over {base}, which is not a local model directory (no "
            f"{MODEL_CONFIG} there; models are never downloaded): put that base model at {base_dir}, "
            f"or name where it is in base_model_name_or_path of {path / ADAPTER_CONFIG}"
        )
    return ModelDir(path, base_dir, path)


def load_causal_lm(model_dir: ModelDir, *, dtype: Any, train_adapter: bool = False) -> Any:
    """The causal LM of ``model_dir``: a plain model, or its base with the adapter merged in; with
    ``train_adapter`` an adapter stays a trainable peft model instead (a LoRA stage goes on
    training it, and can save it as an adapter over the same base)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir.base, local_files_only=True, dtype=dtype)
    if model_dir.adapter is None:
        return model
    try:
        from peft import PeftModel
    except ImportError:
        raise ModelDirError(
            f"{model_dir.path} is a LoRA adapter; loading it needs peft: pip install 'cudal1[train]'"
        ) from None
    adapted = PeftModel.from_pretrained(model, model_dir.adapter, is_trainable=train_adapter)
    return adapted if train_adapter else adapted.merge_and_unload()


def load_tokenizer(model_dir: ModelDir) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir.tokenizer_dir, local_files_only=True)
