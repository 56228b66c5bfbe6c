"""The reward's bar: a speedup counted over eager, or over the faster of eager and the task's
torch.compile baselines measured in the same run (eager, and said so, while none verified)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, cast

import pytest
from train_fixtures import GELU, make_result, reward_over_stored, score, store_evaluated, variant

from cudal1.config import RewardConfig
from cudal1.run.database import CandidateDB
from cudal1.run.selection import EAGER, Bar, best_baseline
from cudal1.train.reward import reward_from_result
from cudal1.train.reward_bar import RewardBars


def test_the_best_baseline_is_the_faster_of_eager_and_torch_compile() -> None:
    both = {"torch-compile-default": 1.4, "torch-compile-reduce-overhead": 2.0, "cuda-graph": 3.0}
    assert best_baseline(both) == Bar("torch-compile-reduce-overhead", 2.0)  # a CUDA graph is no bar
    assert best_baseline({"torch-compile-default": 0.8}) == Bar(EAGER, 1.0)  # eager is the faster
    assert best_baseline({}) == Bar(EAGER, 1.0, "torch.compile not measured yet")
    assert best_baseline({"torch-compile-default": None}) == Bar(EAGER, 1.0, "torch.compile failed")


def test_reward_over_a_bar() -> None:
    cfg = RewardConfig(quantum=0.0)
    fast = make_result("t", "s", 3.0)  # CI [2.97, 3.03]
    assert reward_from_result(fast, cfg, bar=2.0) == pytest.approx(math.log(2.97 / 2.0))
    slower = make_result("t", "s", 1.5)  # faster than eager, slower than torch.compile: negative
    assert reward_from_result(slower, cfg, bar=2.0) == pytest.approx(math.log(1.485 / 2.0))
    tie = make_result("t", "s", 2.02)  # within 2 % of the bar: a tie earns nothing
    assert reward_from_result(tie, cfg, bar=2.0) == 0.0
    assert reward_from_result(fast, cfg) == pytest.approx(math.log(2.97))  # bar 1.0: eager
    with pytest.raises(ValueError):
        reward_from_result(fast, cfg, bar=0.0)


def test_bars_come_from_the_runs_own_compile_baselines(tmp_path: Path) -> None:
    with CandidateDB(tmp_path / "c.db") as db:
        bars = RewardBars(db, "best-baseline")
        assert bars.bar(GELU.name) == Bar(EAGER, 1.0, "torch.compile not measured yet")
        store_evaluated(db, GELU, variant(1), 1.8, label="torch-compile-default", backend="baseline")
        store_evaluated(db, GELU, variant(2), None, label="torch-compile-reduce-overhead", backend="baseline")
        # a policy's completion is not a baseline, whatever its label says
        store_evaluated(db, GELU, variant(3), 9.0, label="torch-compile-max-autotune")
        assert bars.bar(GELU.name) == Bar("torch-compile-default", 1.8)
        assert RewardBars(db, "eager").bar(GELU.name) == Bar(EAGER, 1.0)


def test_a_failed_compile_baseline_leaves_the_bar_at_eager(tmp_path: Path) -> None:
    with CandidateDB(tmp_path / "c.db") as db:
        store_evaluated(
            db, GELU, variant(1), 2.0, label="torch-compile-default", backend="baseline", correct=False
        )
        assert RewardBars(db, "best-baseline").bar(GELU.name) == Bar(EAGER, 1.0, "torch.compile failed")


@pytest.mark.parametrize("kind", ["best-baseline", "eager"])
def test_grpo_rewards_a_speedup_over_the_faster_of_eager_and_torch_compile(tmp_path: Path, kind: str) -> None:
    cfg = RewardConfig(bar=cast(Any, kind))
    with CandidateDB(tmp_path / "c.db") as db:
        store_evaluated(db, GELU, variant(1), 2.0, label="torch-compile-default", backend="baseline")
        store_evaluated(db, GELU, variant(2), 1.2, label="torch-compile-reduce-overhead", backend="baseline")
        fast = store_evaluated(db, GELU, variant(3), 3.0, label="grpo-s0-0")
        slow = store_evaluated(db, GELU, variant(4), 1.5, label="grpo-s0-1")
        rewards = score(reward_over_stored(db, tmp_path, cfg), [variant(3), variant(4)])
        results = [db.get(fast).result, db.get(slow).result]
    bar = 2.0 if kind == "best-baseline" else 1.0
    assert rewards == [reward_from_result(cast(Any, r), cfg, bar=bar) for r in results]
    assert (rewards[1] < 0) == (kind == "best-baseline")  # 1.5x eager is slower than torch.compile
    step = json.loads((tmp_path / "steps.jsonl").read_text())
    assert step["reward_bar"] == kind
    label = "torch-compile-default" if kind == "best-baseline" else EAGER
    assert step["bars"] == {GELU.name: {"label": label, "speedup": bar, "note": ""}}


def test_grpo_says_when_it_falls_back_to_eager(tmp_path: Path) -> None:
    cfg = RewardConfig()
    with CandidateDB(tmp_path / "c.db") as db:
        cand = store_evaluated(db, GELU, variant(3), 3.0, label="grpo-s0-0")
        rewards = score(reward_over_stored(db, tmp_path, cfg), [variant(3)])
        result = db.get(cand).result
    assert rewards == [reward_from_result(cast(Any, result), cfg)]
    step = json.loads((tmp_path / "steps.jsonl").read_text())
    assert step["bars"][GELU.name] == {
        "label": EAGER,
        "speedup": 1.0,
        "note": "torch.compile not measured yet",
    }
