"""GRPO launched as two processes on CPU (``torchrun``, what ``accelerate launch`` runs under):
one run directory, one database, one evaluator service, each candidate evaluated once."""

from __future__ import annotations

import functools
import inspect
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
from transformers import TrainingArguments
from transformers.training_args import ParallelMode

from cudal1.run.database import CandidateDB
from cudal1.train.grpo import check_own_eval_devices
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


class _NoLauncherArgs:
    """What HF's TrainingArguments does with no launcher: its (cached) device setup counts every
    visible GPU as its own and picks cuda:0."""

    def __init__(self, visible: int, distributed: bool = False) -> None:
        self.visible, self.distributed = visible, distributed

    @functools.cached_property
    def _setup_devices(self) -> torch.device:
        self._n_gpu = self.visible
        return torch.device("cuda:0")

    @property
    def device(self) -> torch.device:
        return self._setup_devices

    @property
    def n_gpu(self) -> int:
        _ = self._setup_devices
        return self._n_gpu

    @property
    def parallel_mode(self) -> ParallelMode:
        if self.distributed:
            return ParallelMode.DISTRIBUTED
        return ParallelMode.NOT_DISTRIBUTED if self.n_gpu > 1 else ParallelMode.NOT_PARALLEL


def test_a_process_no_launcher_started_trains_on_its_one_gpu_while_the_others_evaluate(monkeypatch) -> None:
    """On two H200s, SFT and GRPO with --eval-devices cuda:1 stopped before their first step:
    TRL's trainers refuse the nn.DataParallel HF's Trainer sets up over every visible GPU."""
    current: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    args = one_device(_NoLauncherArgs(visible=2), "cuda")
    assert args.n_gpu == 1 and args.parallel_mode is ParallelMode.NOT_PARALLEL
    assert args.device == torch.device("cuda", 0) and current == [torch.device("cuda", 0)]
    # a GPU named in the config is the one trained on, not HF's cuda:0
    args = one_device(_NoLauncherArgs(visible=4), "cuda:2")
    assert args.device == torch.device("cuda:2") and args.n_gpu == 1 and current[-1] == torch.device("cuda:2")
    # under a launcher each process has its own GPU already; on the CPU nothing is pinned
    launched = one_device(_NoLauncherArgs(visible=1, distributed=True), "cuda:1")
    assert launched.device == torch.device("cuda:0")
    cpu = _NoLauncherArgs(visible=2)
    assert one_device(cpu, "cpu") is cpu and "_setup_devices" not in cpu.__dict__


def test_the_device_setup_one_device_replaces_is_hfs_cached_one() -> None:
    """``one_device`` sets the cached value of HF's ``_setup_devices``: a transformers release that
    renames it or stops caching it must fail here, not on the GPU machine."""
    assert isinstance(inspect.getattr_static(TrainingArguments, "_setup_devices"), functools.cached_property)
    assert "_n_gpu" in inspect.getsource(TrainingArguments)
