"""The composition step that ends every round: which candidates the transforms go over, what a
composition records of where it came from, the repaired twin's place in it, a CPU that gets no
CUDA-only variants, and a killed run that resumes without duplicating a composition."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from candidate_fixtures import make_result
from run_fixtures import CONV, Killed, Recorder, fast_config
from test_search_transforms import KERNEL

from cudal1.config import ComposeConfig, OptimizeConfig
from cudal1.run.database import CandidateDB
from cudal1.run.directory import RunDirectory
from cudal1.run.events import Evaluated, RunStarted
from cudal1.run.rows import Provenance
from cudal1.run.selection import REFERENCE_LABEL
from cudal1.schema import Finding, Severity, Stage, Task
from cudal1.search import optimize as optimize_module
from cudal1.search.contrastive import ContrastivePlan
from cudal1.search.lifecycle import Proposal
from cudal1.search.optimize import optimize
from cudal1.search.proposer import compositions

STATE_LEFT = Finding(
    "global_state_changed",
    Severity.REJECT,
    Stage.INTEGRITY,
    "process-wide torch settings changed",
    {"changed": {"cudnn.benchmark": [False, True]}},
)
CACHED = Finding("cached_output", Severity.REJECT, Stage.INTEGRITY, "outputs reused across calls")
CONFIG = ComposeConfig(top_k=2, transforms=("channels-last", "cuda-graph"))


class Rows:
    """A task's candidates in a real database, each with a result."""

    def __init__(self, db: CandidateDB, task: Task) -> None:
        self.db, self.task, self.n = db, task, 0

    def add(
        self,
        label: str,
        speedup: float | None,
        *,
        round: int = 0,
        backend: str = "scripted",
        origin: str = "",
        findings: tuple[Finding, ...] = (),
        correct: bool = True,
    ) -> int:
        self.n += 1
        source = f"{KERNEL}\n# variant {self.n}\n"
        prov = Provenance(round=round, backend=backend, origin=origin)
        cid = self.db.add_candidate(self.task, source, prov, label=label)
        result = make_result(self.task.name, source, speedup, correct=correct)
        self.db.record_result(cid, dataclasses.replace(result, findings=findings))
        return cid

    def compose(self, r: int, *, cuda: bool = False, config: ComposeConfig = CONFIG) -> list[Proposal]:
        return compositions(self.task, r, self.db.evaluated(self.task.name), config, cuda=cuda)


def test_transforms_go_over_each_rounds_best_kernels_and_say_where_they_came_from(tmp_path: Path) -> None:
    with CandidateDB(tmp_path / "c.db") as db:
        rows = Rows(db, CONV)
        rows.add("channels-last", 5.0, backend="baseline", origin="channels-last")  # a baseline
        rows.add(REFERENCE_LABEL, 1.0, backend="baseline", origin=REFERENCE_LABEL)
        seed = rows.add("seed-a", 2.0, backend="seed", origin="seed test")
        rows.add("channels-last@3", 4.0, backend="compose", origin="seed test > channels-last")
        # round 0: only the seed is a base; on a CPU no CUDA graph
        assert [(p.label, p.origin, p.base_id) for p in rows.compose(0)] == [
            (f"channels-last@{seed}", "seed test > channels-last", seed)
        ]
        assert [p.label for p in rows.compose(0, cuda=True)] == [
            f"channels-last@{seed}",
            f"cuda-graph@{seed}",
        ]

        rows.add("llm-r1-s0", 1.5, round=1)
        s1 = rows.add("llm-r1-s1", 3.0, round=1)
        s2 = rows.add("llm-r1-s2", 2.5, round=1)
        rows.add("llm-r1-s3", 9.0, round=1, correct=False)
        s4 = rows.add("llm-r1-s4", None, round=1, findings=(STATE_LEFT,))
        rows.add("llm-r1-s5", None, round=1, findings=(STATE_LEFT, CACHED))  # not only the state
        proposals = rows.compose(1)
        assert [(p.label, p.origin, p.base_id) for p in proposals] == [
            (f"channels-last@{s1}", "llm-r1-s1 > channels-last", s1),
            (f"channels-last@{s2}", "llm-r1-s2 > channels-last", s2),
            (f"repaired@{s4}", "llm-r1-s4 > repaired", s4),
        ]
        assert "_STATE_BEFORE_IMPORT = _process_state()" in proposals[-1].source

        # the twin, once verified, is a base like any kernel, and is not twinned again
        twin = rows.add(f"repaired@{s4}", 4.0, round=1, backend="compose", origin="llm-r1-s4 > repaired")
        assert [p.label for p in rows.compose(1)] == [
            f"channels-last@{twin}",
            f"channels-last@{s1}",
            f"repaired@{s4}",
        ]
        assert rows.compose(1, config=CONFIG.model_copy(update={"enabled": False})) == []


def test_a_cpu_run_proposes_no_cuda_only_variants(tmp_path: Path) -> None:
    plan = ContrastivePlan(fast_config(tmp_path, baseline_labels=None), None)
    labels = [p.label for p in plan.seeds(CONV)]
    assert "channels-last" in labels and REFERENCE_LABEL in labels
    assert not [label for label in labels if "cuda-graph" in label or "cudnn" in label]


SEED = """import torch
import torch.nn as nn

_SCALE = 1.0  # module-level code the compositions keep


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x):
        return self.conv(x) * _SCALE
"""


class SeededPlan(ContrastivePlan):
    def seeds(self, task: Task) -> list[Proposal]:
        return [Proposal("seed-kernel", SEED, origin="seed test"), *super().seeds(task)]


@pytest.mark.parametrize("kill_after", [2, 3], ids=["before-composing", "after-composing"])
def test_a_no_llm_run_composes_over_its_seed_and_resumes_without_duplicates(
    tmp_path: Path, open_db: Any, monkeypatch: pytest.MonkeyPatch, kill_after: int
) -> None:
    """Killed after round 0's seed and reference (2) or after its composition too (3): either way
    the resumed round composes (again), and the composition is stored and evaluated once."""
    monkeypatch.setattr(optimize_module, "ContrastivePlan", SeededPlan)
    run = tmp_path / "run"
    compose = {"enabled": True, "transforms": ["channels-last", "cuda-graph+cudnn-benchmark"]}
    killed = Recorder(kill_after=kill_after)
    with pytest.raises(Killed):
        optimize([CONV], run, fast_config(tmp_path, compose=compose), progress=killed)
    started = next(e for e in killed.events if isinstance(e, RunStarted))
    assert started.tasks[CONV.name].total == 3  # seed, reference, one composition (no CUDA pair on a CPU)
    db = open_db(run)
    assert db.counts(CONV.name).evaluated == kill_after and db.rounds_done(CONV.name) == 0

    config = RunDirectory(run).read_config(OptimizeConfig)
    resumed = Recorder()
    optimize([CONV], run, config, resume=True, progress=resumed)
    (seed,) = [r for r in db.evaluated(CONV.name) if r.label == "seed-kernel"]
    composed = [r for r in db.evaluated(CONV.name) if r.backend == "compose"]
    assert [(r.label, r.origin, r.base_id, r.round) for r in composed] == [
        (f"channels-last@{seed.id}", "seed test > channels-last", seed.id, 0)
    ]
    assert composed[0].correct and resumed.count(Evaluated) == 3 - kill_after
    assert db.rounds_done(CONV.name) == 1

    again = Recorder()
    optimize([CONV], run, config, resume=True, progress=again)
    assert again.count(Evaluated) == 0 and db.counts(CONV.name).total == 3
