"""Fixtures for the training tests: a tiny model built here (no hub), one SFT'd to answer with
whole programs, evaluator budgets small enough for a 2-core CPU, and no real LLM endpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from run_fixtures import closed_port_url, no_real_endpoint  # noqa: F401 (fixtures)
from train_fixtures import ANSWERS, GELU, corpus, eval_data

from cudal1.config import LoraSettings, OptimSettings
from cudal1.train.tiny_model import build_tiny_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", corpus())


@pytest.fixture(scope="session")
def answering_model(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model fine-tuned (full weights, high learning rate) until it answers the GELU
    prompts with one of ``ANSWERS``: mostly the correct variant, else a rejected one or no code."""
    from datasets import Dataset

    from cudal1.search.prompts import render_generation_prompt
    from cudal1.train.sft import fine_tune

    rows = [
        {"prompt": render_generation_prompt(GELU), "completion": [{"role": "assistant", "content": a}]}
        for a in (ANSWERS[0], *ANSWERS)  # the correct variant twice: the most likely answer
    ] * 3
    return fine_tune(
        tiny_model,
        Dataset.from_list(rows),
        tmp_path_factory.mktemp("answering"),
        optim=OptimSettings(
            learning_rate=5e-3, max_steps=20, batch_size=4, report_to="none", save_steps=1000
        ),
        lora=LoraSettings(enabled=False),
        max_length=2048,
        device="cpu",
    )


@pytest.fixture
def eval_config(tmp_path: Path) -> dict[str, Any]:
    return eval_data(tmp_path)
