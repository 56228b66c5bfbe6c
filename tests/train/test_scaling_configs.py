"""The files docs/scaling.md ships (configs/scaling/): the cudal1 GRPO config loads through the
strict config and its batch arithmetic is the doc's; each accelerate config loads as accelerate
reads it and passes accelerate's own DeepSpeed checks; each DeepSpeed file has what DeepSpeed
needs and leaves "auto" only where the transformers Trainer fills it. No GPU, no deepspeed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from accelerate.commands.config.config_args import load_config_from_file
from accelerate.utils import DeepSpeedPlugin

from cudal1.config import GRPOStageConfig, load_config
from cudal1.train import grpo

ROOT = Path(__file__).resolve().parents[2]
SCALING = ROOT / "configs" / "scaling"

# The "auto" values transformers' Trainer fills from its arguments and the model
# (transformers/integrations/deepspeed.py, HfTrainerDeepSpeedConfig.trainer_config_process and
# trainer_config_finalize); an "auto" anywhere else would reach DeepSpeed as the string "auto".
FILLED_BY_TRAINER = {
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "train_batch_size",
    "gradient_clipping",
    "bf16.enabled",
    "fp16.enabled",
    "zero_optimization.reduce_bucket_size",
    "zero_optimization.stage3_prefetch_bucket_size",
    "zero_optimization.stage3_param_persistence_threshold",
}
# (accelerate config, DeepSpeed file, ZeRO stage, training processes) of the recipe.
RECIPES = [("accelerate-zero2.yaml", "zero2.json", 2, 2), ("accelerate-zero3.yaml", "zero3.json", 3, 4)]


def auto_keys(config: dict[str, Any], prefix: str = "") -> set[str]:
    keys: set[str] = set()
    for key, value in config.items():
        if isinstance(value, dict):
            keys |= auto_keys(value, f"{prefix}{key}.")
        elif value == "auto":
            keys.add(f"{prefix}{key}")
    return keys


@pytest.mark.parametrize(("accelerate_file", "ds_file", "stage", "processes"), RECIPES)
def test_accelerate_config_loads_and_passes_accelerates_deepspeed_checks(
    accelerate_file: str, ds_file: str, stage: int, processes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = load_config_from_file(str(SCALING / accelerate_file))  # unknown keys raise here
    assert cluster.distributed_type == "DEEPSPEED" and cluster.num_processes == processes
    assert cluster.num_machines == 1 and cluster.mixed_precision is None
    ds = cluster.deepspeed_config
    assert ds is not None and (ROOT / ds["deepspeed_config_file"]) == SCALING / ds_file
    # What `accelerate launch` hands the processes (commands/launch.py, launch_command): the
    # config's DeepSpeed keys, plus mixed_precision where the config sets it; with a DeepSpeed
    # file, DeepSpeedPlugin refuses the ones the file decides.
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("ACCELERATE_CONFIG_DS_FIELDS", ",".join(ds))
    plugin = DeepSpeedPlugin(hf_ds_config=ds["deepspeed_config_file"], zero3_init_flag=ds["zero3_init_flag"])
    assert plugin.zero_stage == stage
    assert plugin.hf_ds_config.is_zero3() == (stage == 3) == ds["zero3_init_flag"]


@pytest.mark.parametrize("ds_file", ["zero2.json", "zero3.json"])
def test_deepspeed_file_leaves_auto_only_where_the_trainer_fills_it(ds_file: str) -> None:
    config = json.loads((SCALING / ds_file).read_text())
    assert config["zero_optimization"]["stage"] in (2, 3)
    assert {"train_micro_batch_size_per_gpu", "gradient_accumulation_steps"} <= config.keys()
    assert auto_keys(config) <= FILLED_BY_TRAINER
    assert config["bf16"]["enabled"] == "auto"  # optim.precision decides, through the Trainer
    if config["zero_optimization"]["stage"] == 3:  # a saved model is whole, not shards
        assert config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True


def test_grpo_config_loads_strictly_and_its_batch_is_the_docs(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_config(GRPOStageConfig, SCALING / "grpo-7b.yaml")
    lora_processes = RECIPES[0][3]
    # 16 prompts x 8 completions, one optimizer step per generation batch (docs/scaling.md).
    assert cfg.optim.batch_size * lora_processes * cfg.steps_per_generation == 16 * cfg.num_generations
    assert cfg.steps_per_generation == cfg.optim.grad_accumulation
    assert cfg.generation.backend == "vllm-server" and cfg.lora.enabled
    monkeypatch.setattr(grpo, "vllm_installed", lambda: True)
    args = grpo.grpo_arguments(cfg, Path("/nonexistent/out"), "cpu")
    assert (args.use_vllm, args.vllm_mode, args.vllm_server_port) == (True, "server", 8000)
    assert args.generation_batch_size == cfg.optim.batch_size * cfg.steps_per_generation  # one process here
