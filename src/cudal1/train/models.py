"""What every training stage does the same way: load a local model, pick device and precision,
build the trainer arguments and LoRA adapters, find a checkpoint to resume, save the result.

Models load from local directories only (``local_files_only=True``): nothing is downloaded,
and a stage's output (``OUT/model``) is a plain transformers directory, with LoRA adapters merged
in, so that the next stage (or ``--llm hf:OUT/model``) loads it the same way.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    TrainerCallback,
)

from cudal1.config import LoraSettings, OptimSettings
from cudal1.run.directory import RunDirectory
from cudal1.run.events import ProgressCallback, TrainStep

log = logging.getLogger(__name__)

MODEL_DIR, CHECKPOINT_DIR = "model", "checkpoints"
# A checkpoint counts once the trainer's state is written, which Trainer does last: a kill while
# a checkpoint was being saved leaves a directory without it, and resume skips that one.
_STATE_FILE = "trainer_state.json"

# TRL sends a usage ping when a trainer is built unless these are set; the GPU machines have no
# network and tests must not reach one (shared/research/rl-stack.md, "Telemetry").
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


class TrainError(Exception):
    """A stage that cannot start as asked (missing model, data or run directory)."""


def check_stage_start(run: RunDirectory, resume: bool) -> None:
    """A stage writes into a new or empty directory, or continues its own run with ``resume``."""
    if run.path.is_dir() and any(run.path.iterdir()) and not resume:
        raise TrainError(f"{run.path} exists and is not empty: pass --resume to continue that run")


class StepProgress(TrainerCallback):
    """Each logged optimizer step of a trainer as a ``TrainStep`` event (the CLI's progress bar or line)."""

    def __init__(self, progress: ProgressCallback, phase: str) -> None:
        self.progress, self.phase = progress, phase

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
    ) -> None:
        if not logs or "train_runtime" in logs:  # the closing summary is no step
            return
        self.progress(TrainStep(self.phase, state.global_step, state.max_steps, dict(logs)))


def progress_callbacks(progress: ProgressCallback | None, phase: str) -> list[TrainerCallback]:
    return [] if progress is None else [StepProgress(progress, phase)]


def training_device(device: str) -> str:
    """``auto``: the first CUDA GPU, else CPU; ``cuda:N`` becomes the current CUDA device, which
    is the one the trainer (accelerate) places the model on."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise TrainError(f"device {device}: no CUDA GPU here")
        if ":" in device:
            torch.cuda.set_device(int(device.split(":")[1]))
    return device


def use_bf16(precision: str, device: str) -> bool:
    if precision == "bf16":
        return True
    return precision == "auto" and device.startswith("cuda") and torch.cuda.is_bf16_supported()


def load_policy(path: Path, *, bf16: bool) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Model and tokenizer from a local directory; the tokenizer gets a pad token if it has none."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise TrainError(f"{path}: not a local model directory (no config.json; models are never downloaded)")
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dtype = torch.bfloat16 if bf16 else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
    return model, tokenizer


def lora_config(settings: LoraSettings) -> LoraConfig | None:
    if not settings.enabled:
        return None
    targets = settings.target_modules
    return LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=targets if isinstance(targets, str) else list(targets),
        task_type="CAUSAL_LM",
    )


def trainer_arguments(optim: OptimSettings, out: Path, device: str) -> dict[str, Any]:
    """Keyword arguments every TRL config of ours shares (``SFTConfig``, ``GRPOConfig``)."""
    return {
        "output_dir": str(Path(out) / CHECKPOINT_DIR),
        "learning_rate": optim.learning_rate,
        "max_steps": optim.max_steps,
        "per_device_train_batch_size": optim.batch_size,
        "gradient_accumulation_steps": optim.grad_accumulation,
        "warmup_steps": optim.warmup_steps,
        "bf16": use_bf16(optim.precision, device),
        "gradient_checkpointing": optim.gradient_checkpointing,
        "logging_steps": optim.logging_steps,
        "save_strategy": "steps",
        "save_steps": optim.save_steps,
        "report_to": [] if optim.report_to == "none" else [optim.report_to],
        "seed": optim.seed,
        "use_cpu": device == "cpu",
        "disable_tqdm": True,
    }


def last_checkpoint(out: Path) -> Path | None:
    """The newest complete checkpoint under ``out/checkpoints``, or None."""
    root = Path(out) / CHECKPOINT_DIR
    if not root.is_dir():
        return None
    done = [p for p in root.glob("checkpoint-*") if (p / _STATE_FILE).is_file() and p.name[11:].isdigit()]
    return max(done, key=lambda p: int(p.name[11:]), default=None)


def save_policy(model: Any, tokenizer: PreTrainedTokenizerBase, out: Path) -> Path:
    """Save a plain model directory at ``out``: LoRA adapters merged into the weights."""
    if isinstance(model, PeftModel):
        model = model.merge_and_unload()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    log.info("saved model to %s", out)
    return out
