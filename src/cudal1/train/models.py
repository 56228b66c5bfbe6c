"""What every training stage does the same way: load a local model, pick device and precision,
build the trainer arguments and LoRA adapters, find a checkpoint to resume, save the result.

Models load from local directories only (``local_files_only=True``): nothing is downloaded.
A stage's output (``OUT/model``) is a plain transformers directory with LoRA adapters merged in
(``lora.save: merged``, the default), or the adapter alone (``lora.save: adapter``), whose
``adapter_config.json`` names the base model's absolute path. The next stage and
``--llm hf:OUT/model`` load either (``llm.model_dir``); a LoRA stage given an adapter goes on
training that adapter (its rank and targets, not the stage's ``lora`` ones), so that every stage
of a run saves an adapter over the same base instead of a stack of adapters.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel
from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback
from transformers.training_args import ParallelMode

from cudal1.config import LoraSettings, ModelSave, OptimSettings
from cudal1.llm.model_dir import ModelDirError, load_causal_lm, load_tokenizer, read_model_dir
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
    """``auto``: the first CUDA GPU, else CPU; ``cuda:N`` becomes the current CUDA device. The
    trainer's config would put cuda:0 back (HF's device setup): ``one_device`` keeps it on N."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise TrainError(f"device {device}: no CUDA GPU here")
        if ":" in device:
            torch.cuda.set_device(int(device.split(":")[1]))
    return device


def one_device(args: Any, device: str) -> Any:
    """Pin a TRL config (``SFTConfig``, ``GRPOConfig``) of a process that no launcher started to
    ``device`` alone. With no launcher, HF's ``Trainer`` counts every visible GPU as its own
    (``n_gpu``: ``nn.DataParallel``), which TRL's trainers refuse ("does not support
    nn.DataParallel": on two H200s, ``--eval-devices cuda:1`` stopped SFT and GRPO before their
    first step, 2026-11-28), and it places the model on cuda:0 whatever GPU was made current. Here
    the other GPUs are the evaluator's (``eval_devices``). Under a launcher each process has its
    own GPU already; on the CPU there is nothing to pin."""
    if not device.startswith("cuda") or args.parallel_mode == ParallelMode.DISTRIBUTED:
        return args
    # The config's construction ran HF's device setup already (cuda:0, made current): plain
    # "cuda" is that GPU, as before; "cuda:N" is N.
    target = torch.device(device if ":" in device else "cuda:0")
    args.__dict__["_setup_devices"] = target  # the cached value of ``args.device``
    args._n_gpu = 1
    torch.cuda.set_device(target)
    return args


def use_bf16(precision: str, device: str) -> bool:
    if precision == "bf16":
        return True
    return precision == "auto" and device.startswith("cuda") and torch.cuda.is_bf16_supported()


def load_policy(
    path: Path, *, bf16: bool, train_adapter: bool = False
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Model and tokenizer from a local model or adapter directory; the tokenizer gets a pad token
    if it has none. An adapter is merged into its base, or with ``train_adapter`` kept as a
    trainable peft model (``lora_for`` then gives the trainer no second adapter)."""
    try:
        model_dir = read_model_dir(path)
    except ModelDirError as exc:
        raise TrainError(str(exc)) from None
    tokenizer = load_tokenizer(model_dir)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dtype = torch.bfloat16 if bf16 else torch.float32
    model = load_causal_lm(model_dir, dtype=dtype, train_adapter=train_adapter)
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


def lora_for(model: Any, settings: LoraSettings) -> LoraConfig | None:
    """The adapters a trainer adds to ``model``: none when it already carries a trainable one
    (``load_policy(train_adapter=True)`` on an adapter directory), which training continues."""
    if not isinstance(model, PeftModel):
        return lora_config(settings)
    adapter = model.peft_config["default"]
    log.info(
        "continuing the LoRA adapter loaded with the model (r=%s, alpha=%s over %s); lora.r, "
        "lora.alpha and lora.target_modules of this stage apply to a plain model only",
        getattr(adapter, "r", "?"),
        getattr(adapter, "lora_alpha", "?"),
        adapter.base_model_name_or_path,
    )
    return None


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


def save_policy(
    model: Any, tokenizer: PreTrainedTokenizerBase, out: Path, save: ModelSave = "merged"
) -> Path:
    """Save ``model`` at ``out``: a plain model directory with LoRA adapters merged into the
    weights, or (``save="adapter"``) the trained adapter alone, beside the tokenizer."""
    out = Path(out)
    if save == "adapter" and not isinstance(model, PeftModel):
        raise TrainError("lora.save=adapter: the trained model has no LoRA adapter (lora.enabled=false?)")
    out.mkdir(parents=True, exist_ok=True)
    if isinstance(model, PeftModel) and save == "adapter":
        # GRPO with beta > 0 adds a frozen copy of the adapter ("ref") as its reference: not saved
        model.save_pretrained(str(out), selected_adapters=["default"])
        what = f"the LoRA adapter (over {model.peft_config['default'].base_model_name_or_path})"
    else:
        if isinstance(model, PeftModel):
            model = model.merge_and_unload()
        model.save_pretrained(out)
        what = "the model"
    tokenizer.save_pretrained(out)
    log.info("saved %s to %s", what, out)
    return out
