"""``cudal1 capacity``: a thin layer over ``train.capacity``: the split it prints at 80 columns,
in Markdown and JSON; the training rate as tokens per second or as a step's seconds; numbers no
split can meet are bad input."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from cudal1.cli import app

runner = CliRunner()
# The hand-worked case of tests/train/test_capacity.py: one GPU takes 32 s to generate a step's
# 32 completions, 64 s to train on them, 360 s to evaluate them; the best of 8 GPUs is 1/2/5.
HAND = [
    "capacity", "--evals-per-gpu-hour", "320", "--gen-tokens-per-s", "1000", "--prompts", "8",
    "--num-generations", "4", "--prompt-tokens", "1000", "--completion-tokens", "1000",
]  # fmt: skip


def test_prints_the_split_within_80_columns() -> None:
    result = runner.invoke(app, [*HAND, "--train-tokens-per-s", "1000"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    table = [line.split() for line in lines if line.startswith("  ") and line.split()]  # rich's rows
    rows = {cells[0]: cells for cells in table}
    assert rows["training"][2:4] == ["2", "0-1"]  # first: accelerate puts rank i on cuda:i
    assert rows["generation"][3:5] == ["1", "2"]
    assert rows["evaluation"][2:4] == ["5", "3-7"]
    assert rows["step"][1:] == ["8", "136.0"]
    assert "bottleneck: evaluation, 53% of a 136.0 s step" in result.output


def test_a_training_step_time_gives_the_same_split() -> None:
    # 4 completions of 2000 tokens in 8 s on one GPU: 1000 tokens per second, as above.
    by_step = runner.invoke(
        app, [*HAND, "--train-step-s", "8", "--step-completions", "4", "--format", "json"]
    )
    by_rate = runner.invoke(app, [*HAND, "--train-tokens-per-s", "1000", "--format", "json"])
    assert by_step.exit_code == 0, by_step.output
    assert json.loads(by_step.output) == json.loads(by_rate.output)
    data = json.loads(by_rate.output)
    assert {s: v["gpus"] for s, v in data["sides"].items()} == {
        "generation": 1,
        "training": 2,
        "evaluation": 5,
    }
    assert data["step_s"] == 136.0 and data["bottleneck"] == "evaluation"


def test_markdown_keeps_every_column() -> None:
    result = runner.invoke(app, [*HAND, "--train-tokens-per-s", "1000", "--format", "md"])
    assert result.exit_code == 0, result.output
    assert "| side | GPUs | indices | per GPU | s per step | busy |" in result.output
    assert "| evaluation (timing) | 5 | 3-7 | 320 evals/h | 72.0 | 53% |" in result.output


def test_one_training_rate_is_required() -> None:
    neither = runner.invoke(app, HAND)
    both = runner.invoke(app, [*HAND, "--train-tokens-per-s", "1000", "--train-step-s", "8"])
    for result in (neither, both):
        assert result.exit_code == 2
        assert "give one of --train-tokens-per-s and --train-step-s" in result.output


def test_a_model_too_large_for_the_node_is_bad_input() -> None:
    result = runner.invoke(app, [*HAND, "--train-tokens-per-s", "1000", "--params-b", "70", "--full"])
    assert result.exit_code == 2
    assert "at least 24 for memory" in result.output
