"""GRPO launched as two processes on CPU (``torchrun``, what ``accelerate launch`` runs under):
one run directory, one database, one evaluator service, each candidate evaluated once."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from train_fixtures import GELU, grpo_config
from transformers.training_args import ParallelMode
from trl import SFTConfig

from cudal1.config import GRPOStageConfig
from cudal1.run.database import CandidateDB
from cudal1.train.grpo import check_own_eval_devices, grpo_arguments
from cudal1.train.models import TrainError, one_device
from cudal1.train.ranks import Ranks

SMALL: dict[str, Any] = {"max_steps": 2, "report_to": "none", "max_tokens": 400}


def test_two_processes_share_one_database_and_one_evaluator(
    answering_model: Path, tmp_path: Path, eval_config: dict[str, Any]
) -> None:
    out = tmp_path / "grpo"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += ["-m", "cudal1.cli", "train", "grpo", "--model", str(answering_model), "--out", str(out)]
    cmd += ["--tasks", GELU.name, "--config", str(grpo_config(tmp_path, eval_config, **SMALL))]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    said = done.stdout + done.stderr + (out / "run.log").read_text() + (out / "run-rank-1.log").read_text()

    assert len(re.findall(r"evaluator service on ", said)) == 1  # one service, started once
    assert re.search(r"process 2 of 2", said)  # the second process trained too
    with CandidateDB(out / "candidates.db") as db:
        rows = db._query("SELECT * FROM candidates")
        assert not db.pending(GELU.name)
    evaluated = [r for r in rows if r.status.value == "evaluated"]
    assert evaluated and all(r.result is not None for r in evaluated)
    # every evaluation logged once, by whichever process stored the candidate first
    logged = Counter(int(i) for i in re.findall(rf"{GELU.name} #(\d+) grpo-s\d+-r[01]-\d+ ", said))
    assert set(logged) == {r.id for r in evaluated} and max(logged.values()) == 1
    for name in ("steps.jsonl", "steps-rank-1.jsonl"):  # both processes rewarded both steps
        records = [json.loads(line) for line in (out / name).read_text().splitlines()]
        assert {r["step"] for r in records} == {0, 1}
        assert all(isinstance(x, float) for r in records for x in r["rewards"])
    assert (out / "model" / "config.json").is_file()


def test_a_process_that_trains_on_an_evaluation_gpu_is_refused() -> None:
    with pytest.raises(TrainError, match="GPUs of its own"):
        check_own_eval_devices("cuda:0", ["cuda:0", "cuda:1"])
    check_own_eval_devices("cuda:0", ["cuda:1"])
    check_own_eval_devices("cpu", ["cpu"])  # a test setting: allowed


def test_one_process_is_its_own_main_and_names_its_files_as_before(monkeypatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    ranks = Ranks.current(cpu=True)
    assert ranks.main and not ranks.several
    assert ranks.file_name("steps.jsonl") == "steps.jsonl" and ranks.label_prefix() == ""
    assert ranks.from_main(lambda: 7) == 7
    second = Ranks(index=1, count=2)
    assert second.file_name("steps.jsonl") == "steps-rank-1.jsonl" and second.label_prefix() == "r1-"


def test_each_process_trains_on_its_own_gpu() -> None:
    class State:
        local_process_index = 1

    second = Ranks(index=1, count=2, _state=State())
    assert second.training_device("cuda", "auto") == "cuda:1"
    assert second.training_device("cpu", "cpu") == "cpu"
    with pytest.raises(TrainError, match="its own GPU"):
        second.training_device("cuda", "cuda:0")  # every process on one GPU


def test_a_process_no_launcher_started_trains_on_its_one_gpu_while_the_others_evaluate(
    monkeypatch, tmp_path: Path
) -> None:
    """On two H200s, SFT and GRPO with --eval-devices cuda:1 stopped before their first step:
    with two GPUs visible HF's TrainingArguments count both (n_gpu 2: nn.DataParallel), which
    TRL's trainers refuse. Real TRL configs, on a CPU that says it has two GPUs."""
    current: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    plain = SFTConfig(output_dir=str(tmp_path / "a"), report_to="none", bf16=False)
    assert plain.n_gpu == 2 and plain.parallel_mode is ParallelMode.NOT_DISTRIBUTED  # what TRL refuses
    args = one_device(SFTConfig(output_dir=str(tmp_path / "b"), report_to="none", bf16=False), "cuda:1")
    assert args.n_gpu == 1 and args.parallel_mode is ParallelMode.NOT_PARALLEL
    assert args.device == torch.device("cuda:1") and current[-1] == torch.device("cuda:1")
    grpo_args = grpo_arguments(GRPOStageConfig.model_validate({"optim": {"report_to": "none"}}), tmp_path, "cuda")
    assert grpo_args.n_gpu == 1 and grpo_args.device == torch.device("cuda", 0)
    on_cpu = SFTConfig(output_dir=str(tmp_path / "c"), report_to="none", bf16=False)
    assert one_device(on_cpu, "cpu") is on_cpu and on_cpu.n_gpu == 2  # nothing pinned on the CPU
