"""The three stages end to end on CPU with a tiny model: SFT through the command line (LoRA,
merged on save), a self-supervised round against the CPU evaluator, and contrastive GRPO killed
after its first checkpoint and resumed, with nothing evaluated lost."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from run_fixtures import GELU
from test_train_datasets import make_run
from train_fixtures import grpo_config
from typer.testing import CliRunner

from cudal1.cli import app
from cudal1.config import SelfSupConfig
from cudal1.run.database import CandidateDB
from cudal1.train.selfsup import run_selfsup

QUICK = {"report_to": "none", "batch_size": 4, "save_steps": 1000}


def test_sft_command_trains_lora_and_saves_a_plain_model(tiny_model: Path, tmp_path: Path) -> None:
    make_run(tmp_path / "run", "m1")
    runner = CliRunner()
    data = tmp_path / "data"
    assert runner.invoke(app, ["dataset", "export", str(tmp_path / "run"), "--out", str(data)]).exit_code == 0
    args = ["train", "sft", "--model", str(tiny_model), "--data", str(data), "--out", str(tmp_path / "sft")]
    sets = ["optim.max_steps=2", "optim.report_to=none", "device=cpu", "lora.r=4", "max_length=4096"]
    result = runner.invoke(app, [*args, *(x for s in sets for x in ("--set", s))])
    assert result.exit_code == 0, result.output
    # progress, not on a terminal: a line per logged step, with its loss
    assert "s] sft step 1/2: loss " in result.output and "s] sft step 2/2: loss " in result.output
    model = tmp_path / "sft" / "model"
    assert (model / "config.json").is_file() and not (model / "adapter_config.json").exists()
    assert yaml.safe_load((tmp_path / "sft" / "config.yaml").read_text())["lora"]["r"] == 4
    missing = runner.invoke(app, [*args[:-2], "--out", str(tmp_path / "x"), "--data", str(tmp_path / "none")])
    assert missing.exit_code == 2 and "dataset export" in missing.output


def test_selfsup_round_evaluates_samples_and_trains_on_the_correct_ones(
    answering_model: Path, tmp_path: Path, eval_config: dict[str, Any]
) -> None:
    cfg = SelfSupConfig.model_validate(
        {
            "rounds": 1,
            "samples": 6,
            "sampling": {"max_tokens": 8, "temperature": 0.5, "seed": 0},
            "optim": {**QUICK, "max_steps": 2},
            "lora": {"enabled": False},
            "device": "cpu",
            "eval": eval_config,
            "pool": {"workers": 2, "spares": 1},
        }
    )
    out = tmp_path / "selfsup"
    final = run_selfsup(answering_model, [GELU], out, cfg)
    with CandidateDB(out / "candidates.db") as db:
        stats = json.loads(db.get_meta("selfsup:round-1") or "{}")
        rows = db._query("SELECT * FROM candidates")
        verified = [r for r in db.evaluated(GELU.name) if r.correct and r.result and not r.result.rejected]
    assert stats["samples"] == 6 and stats["kept"] == len(verified) >= 1
    assert len(rows) >= 2 and all(r.round == 1 and r.backend == "hf" for r in rows)
    assert (out / "round-1" / "model" / "config.json").is_file() and (final / "config.json").is_file()
    # a finished round is not run again
    assert run_selfsup(answering_model, [GELU], out, cfg, resume=True) == final


def test_grpo_killed_after_a_checkpoint_resumes_without_losing_evaluations(
    answering_model: Path, tmp_path: Path, eval_config: dict[str, Any]
) -> None:
    out = tmp_path / "grpo"
    cmd = [sys.executable, "-m", "cudal1.cli", "train", "grpo", "--model", str(answering_model)]
    cmd += ["--out", str(out), "--tasks", GELU.name]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    first = subprocess.Popen([*cmd, "--config", str(grpo_config(tmp_path, eval_config))], env=env)
    state = out / "checkpoints" / "checkpoint-1" / "trainer_state.json"
    try:
        while not state.is_file():
            assert first.poll() is None, "GRPO exited before its first checkpoint"
            with contextlib.suppress(subprocess.TimeoutExpired):
                first.wait(timeout=0.5)
        first.send_signal(signal.SIGKILL)
    finally:
        first.wait()
    with CandidateDB(out / "candidates.db") as db:
        before = {r.id: r.step for r in db.evaluated(GELU.name)}
    assert before and set(before.values()) >= {0}

    resumed = subprocess.run([*cmd, "--resume"], env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    with CandidateDB(out / "candidates.db") as db:
        after = {r.id: r.step for r in db.evaluated(GELU.name)}
        pending = db.pending(GELU.name)
        parse_failures = db._query("SELECT * FROM candidates WHERE status = 'parse_failed'")
    assert not pending and all(after[i] == s for i, s in before.items())  # nothing evaluated was lost
    steps = [json.loads(line)["step"] for line in (out / "steps.jsonl").read_text().splitlines()]
    assert {0, 1, 2} <= set(steps)  # every generation batch was rewarded, the resumed ones included
    # every completion carries the step that produced it (a step of the killed session may be
    # generated again after the resume: both batches are kept)
    assert {r.step for r in parse_failures} | set(after.values()) <= set(range(4))
    assert (out / "checkpoints" / "checkpoint-3" / "trainer_state.json").is_file()
    assert (out / "model" / "config.json").is_file()
    assert list((out / "checkpoints" / "runs").rglob("events.out.tfevents.*"))  # TensorBoard logs
