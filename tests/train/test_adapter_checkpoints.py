"""Adapter-only checkpoints (``lora.save: adapter``) on CPU with the tiny model: SFT writes the
adapter alone, ``hf:`` generates from it, the self-supervised stage goes on training that same
adapter over the same base, and an adapter whose base has moved fails with a message naming it."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from safetensors.torch import load_file
from test_train_datasets import make_run
from train_fixtures import GELU, GOOD_ANSWER
from typer.testing import CliRunner

from cudal1.cli import app
from cudal1.config import ConfigError, LoraSettings, SelfSupConfig, load_config
from cudal1.llm import Message, SamplingParams, create_backend
from cudal1.search.prompts import render_generation_prompt
from cudal1.train.models import TrainError, load_policy
from cudal1.train.selfsup import run_selfsup

QUICK = {"report_to": "none", "batch_size": 2, "save_steps": 1000}


def adapter_base(adapter: Path) -> Path:
    return Path(json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"])


def test_sft_adapter_is_loaded_by_hf_and_trained_on_by_selfsup(
    tiny_model: Path, tmp_path: Path, eval_config: dict[str, Any]
) -> None:
    make_run(tmp_path / "run", "m1")
    runner = CliRunner()
    data = tmp_path / "data"
    assert runner.invoke(app, ["dataset", "export", str(tmp_path / "run"), "--out", str(data)]).exit_code == 0
    args = ["train", "sft", "--model", str(tiny_model), "--data", str(data), "--out", str(tmp_path / "sft")]
    sets = ["optim.max_steps=1", "optim.report_to=none", "device=cpu", "lora.r=4", "lora.save=adapter"]
    result = runner.invoke(app, [*args, *(x for s in sets for x in ("--set", s))])
    assert result.exit_code == 0, result.output
    sft = tmp_path / "sft" / "model"
    assert (sft / "adapter_config.json").is_file() and (sft / "adapter_model.safetensors").is_file()
    assert not (sft / "config.json").exists() and not (sft / "model.safetensors").exists()
    assert adapter_base(sft) == tiny_model.resolve()  # absolute, so it loads from anywhere

    backend = create_backend(f"hf:{sft}", device="cpu", dtype="float32")
    chat = [Message(m["role"], m["content"]) for m in render_generation_prompt(GELU)]  # type: ignore[arg-type]
    out = asyncio.run(backend.complete(chat, SamplingParams(n=2, max_tokens=4, seed=0)))
    assert len(out) == 2 and all(c.completion_tokens >= 1 for c in out)

    replies = tmp_path / "replies.yaml"
    replies.write_text(yaml.safe_dump([GOOD_ANSWER]))
    cfg = SelfSupConfig.model_validate(
        {
            "rounds": 1,
            "samples": 2,
            "llm": {"spec": f"scripted:{replies}"},
            "optim": {**QUICK, "max_steps": 1},
            "lora": {"r": 8, "save": "adapter"},
            "device": "cpu",
            "eval": eval_config,
            "pool": {"workers": 1, "spares": 0},
        }
    )
    final = run_selfsup(sft, [GELU], tmp_path / "selfsup", cfg)
    round_1 = tmp_path / "selfsup" / "round-1" / "model"
    assert (round_1 / "adapter_config.json").is_file() and not (round_1 / "config.json").exists()
    assert (final / "adapter_config.json").is_file() and adapter_base(final) == tiny_model.resolve()
    # the SFT adapter was trained on (its rank), not a second adapter stacked over it
    assert json.loads((final / "adapter_config.json").read_text())["r"] == 4
    before, after = (load_file(str(d / "adapter_model.safetensors")) for d in (sft, final))
    assert before.keys() == after.keys() and any(not torch.equal(before[k], after[k]) for k in before)
    model, _ = load_policy(final, bf16=False)
    assert type(model).__name__ == "MistralForCausalLM"  # merged into a plain model

    moved = tmp_path / "moved"
    shutil.copytree(final, moved)
    config = json.loads((moved / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(tmp_path / "gone")
    (moved / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(TrainError, match=r"LoRA adapter over .*gone, which is not a local model directory"):
        load_policy(moved, bf16=False)
    again = runner.invoke(
        app, ["train", "sft", "--model", str(moved), "--data", str(data), "--out", str(tmp_path / "sft2")]
    )
    assert again.exit_code == 2 and "base_model_name_or_path" in again.output


def test_adapter_save_needs_lora() -> None:
    assert LoraSettings(save="adapter").enabled
    with pytest.raises(ConfigError, match="save=adapter needs LoRA"):
        load_config(SelfSupConfig, overrides=["lora.enabled=false", "lora.save=adapter"])
    with pytest.raises(ConfigError, match="lora.save"):
        load_config(SelfSupConfig, overrides=["lora.save=lora"])
