"""Stage 1: supervised fine-tuning on verified variants (TRL's ``SFTTrainer``).

The rows are conversational prompt/completion pairs (``cudal1 dataset export``); with such rows
SFTTrainer computes the loss on the completion only, so the model learns to answer the prompt,
not to reproduce it. LoRA adapters through peft are the default, merged into the saved model
unless ``lora.save`` is ``adapter`` (then ``model/`` holds the adapter alone, over the base it names).

The output directory holds ``config.yaml``, ``run.log``, ``checkpoints/`` (resume starts from
the newest complete one) and ``model/``, the fine-tuned model the next stage loads.
"""

from __future__ import annotations

import logging
from pathlib import Path

from datasets import Dataset, DatasetDict, load_from_disk
from trl import SFTConfig, SFTTrainer

from cudal1.config import LoraSettings, OptimSettings, SFTStageConfig
from cudal1.run.directory import RunDirectory
from cudal1.train.models import (
    MODEL_DIR,
    ProgressCallback,
    TrainError,
    last_checkpoint,
    load_policy,
    lora_for,
    one_device,
    progress_callbacks,
    save_policy,
    trainer_arguments,
    training_device,
)

log = logging.getLogger(__name__)

TRAIN_COLUMNS = ["prompt", "completion"]


def load_rows(data_dir: Path, split: str = "train") -> Dataset:
    """The ``split`` of an exported DatasetDict (or a plain saved Dataset), prompt/completion only."""
    if not Path(data_dir).is_dir():
        raise TrainError(f"{data_dir}: no such dataset directory (see `cudal1 dataset export`)")
    data = load_from_disk(str(data_dir))
    if isinstance(data, DatasetDict):
        if split not in data:
            raise TrainError(f"{data_dir}: no {split!r} split (has {', '.join(data)})")
        data = data[split]
    missing = [c for c in TRAIN_COLUMNS if c not in data.column_names]
    if missing:
        raise TrainError(f"{data_dir}: missing columns {missing}")
    if len(data) == 0:
        raise TrainError(f"{data_dir}: the {split!r} split is empty")
    return data.select_columns(TRAIN_COLUMNS)


def fine_tune(
    model_path: Path,
    rows: Dataset,
    out: Path,
    *,
    optim: OptimSettings,
    lora: LoraSettings,
    max_length: int,
    device: str,
    progress: ProgressCallback | None = None,
    phase: str = "sft",
) -> Path:
    """Train on ``rows`` from ``model_path``; resumes from ``out``'s newest checkpoint; returns
    the saved model directory ``out/model``. ``progress`` gets a ``TrainStep`` event per logged step."""
    device = training_device(device)
    args = one_device(
        SFTConfig(**trainer_arguments(optim, out, device), max_length=max_length, completion_only_loss=True),
        device,
    )
    model, tokenizer = load_policy(model_path, bf16=bool(args.bf16), train_adapter=lora.enabled)
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=rows,
        processing_class=tokenizer,
        peft_config=lora_for(model, lora),
        callbacks=progress_callbacks(progress, phase),
    )
    if len(trainer.train_dataset) == 0:  # type: ignore[arg-type]
        raise TrainError(f"no row keeps a completion token within max_length={max_length}; raise it")
    resume = last_checkpoint(out)
    log.info(
        "SFT of %s on %d rows, %d steps%s",
        model_path,
        len(rows),
        optim.max_steps,
        f", resuming from {resume.name}" if resume else "",
    )
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    return save_policy(trainer.model, tokenizer, Path(out) / MODEL_DIR, lora.save)


def run_sft(
    model_path: Path,
    data_dir: Path,
    out: Path,
    config: SFTStageConfig,
    *,
    progress: ProgressCallback | None = None,
) -> Path:
    """``cudal1 train sft``: the train split of ``data_dir``, saved with its config in ``out``."""
    rows = load_rows(data_dir)
    run = RunDirectory(out)
    run.write_config(config)
    out = run.path
    with run.logging():
        return fine_tune(
            model_path,
            rows,
            out,
            optim=config.optim,
            lora=config.lora,
            max_length=config.max_length,
            device=config.device,
            progress=progress,
        )
