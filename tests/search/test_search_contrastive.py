"""The contrastive loop's parts: budgets, the reference anchor, choosing the best, the config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from candidate_fixtures import GEMM_TASK, make_result
from run_fixtures import fast_config

from cudal1.config import BudgetConfig, OptimizeConfig
from cudal1.llm import Ledger
from cudal1.run.database import CandidateDB
from cudal1.run.rows import Provenance
from cudal1.run.selection import REFERENCE_LABEL, choose_best
from cudal1.schema import EvalResult, Stage, StageRecord
from cudal1.search.budget import Budget
from cudal1.search.seeds import reference_anchor


def _result(seconds: float) -> EvalResult:
    stages = tuple(
        StageRecord(stage, True, seconds)
        for stage in (Stage.STATIC, Stage.COMPILE, Stage.LOAD, Stage.CORRECTNESS, Stage.TIMING)
    )
    return EvalResult(task="t", candidate_hash="", device="cpu", stages=stages)


def test_budget_counts_device_stages_only() -> None:

    now = [0.0]
    budget = Budget(BudgetConfig(max_gpu_seconds=5.0), Ledger(), gpu_seconds=1.0, clock=lambda: now[0])
    budget.add(_result(1.0))  # load + correctness + timing: 3 s; static and compile do not count
    assert budget.gpu_seconds == 4.0 and budget.exhausted() is None
    budget.add(_result(1.0))
    assert budget.exhausted() == "max_gpu_seconds"
    tokens = Budget(BudgetConfig(max_tokens_total=10), Ledger(), tokens_before=20)
    assert tokens.exhausted() == "max_tokens_total" and tokens.exhausted(llm=False) is None
    wall = Budget(BudgetConfig(max_wall_s=10), Ledger(), clock=lambda: now[0])
    now[0] = 9.9
    assert wall.exhausted() is None
    now[0] = 10.0
    assert wall.exhausted() == "max_wall_s"


def test_reference_anchor_is_chosen_only_when_nothing_beats_it(tmp_path: Path) -> None:
    with CandidateDB(tmp_path / "c.db") as db:

        def add(label: str, source: str, speedup: float | None, correct: bool = True) -> int:
            cid = db.add_candidate(GEMM_TASK, source, Provenance(), label=label)
            db.record_result(cid, make_result(GEMM_TASK.name, source, speedup, correct=correct))
            return cid

        anchor = add(REFERENCE_LABEL, reference_anchor(GEMM_TASK), 1.02)
        slow = add("slow", "class ModelNew: A = 1\n", 0.9)
        assert choose_best(db.evaluated(GEMM_TASK.name)).id == anchor  # type: ignore[union-attr]
        add("wrong", "class ModelNew: A = 2\n", 3.0, correct=False)
        assert choose_best(db.evaluated(GEMM_TASK.name)).id == anchor  # type: ignore[union-attr]
        fast = add("fast", "class ModelNew: A = 3\n", 1.5)
        assert choose_best(db.evaluated(GEMM_TASK.name)).id == fast  # type: ignore[union-attr]
        assert slow != fast


def test_reference_anchor_renames_every_use_of_model() -> None:
    source = reference_anchor(GEMM_TASK)  # uses super(Model, self)
    namespace: dict[str, Any] = {}
    exec(compile(source, "<anchor>", "exec"), namespace)
    assert "Model" not in namespace and "ModelNew" in namespace
    model = namespace["ModelNew"](*namespace["get_init_inputs"]())
    assert model(*namespace["get_inputs"]()).shape == (4, 8)


def test_config_rejects_unknown_keys_and_applies_final_budget(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="extra"):
        OptimizeConfig.model_validate({"rounds": 1, "budget": {"max_wall": 3}})
    cfg = fast_config(tmp_path)
    final = cfg.final.apply(cfg.eval)
    assert final.timing.budget_s == 0.5 and final.correctness_trials == 2
    assert final.timing.max_samples == cfg.eval.timing.max_samples
