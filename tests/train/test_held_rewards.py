"""With no judge, a suspicious reward is held: capped to its group's median, listed in the run's
database with why, kept held in a resumed session, and counted in full only once cleared."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from train_fixtures import GELU, reward_over_stored, score, store_evaluated, variant

from cudal1.audit import JudgeVerdict, ScriptedJudge
from cudal1.config import GRPOStageConfig, RewardConfig
from cudal1.run.database import CandidateDB
from cudal1.run.directory import RunDirectory, remember_tasks
from cudal1.train.grpo import prompt_stream
from cudal1.train.reward import cap_held

CFG = RewardConfig(bar="eager", quantum=0.0)


def test_a_held_reward_is_capped_to_the_median_of_the_rest_of_its_group() -> None:
    rewards: list[float | None] = [2.0, 0.5, -1.0, 0.3, 2.0, 1.0, None, 0.1]
    held = [True, False, False, False, True, True, False, True]
    assert cap_held(rewards, held, 4) == [0.3, 0.5, -1.0, 0.3, 0.0, 0.0, None, 0.0]
    # the second group: nothing else has a reward, so the cap is 0.0 (the bar's own); a held
    # reward below its cap keeps it
    assert cap_held([-0.5, 1.0], [True, False], 2) == [-0.5, 1.0]


def group(db: CandidateDB) -> list[int]:
    """A suspicious 8x variant (above the 5x audit threshold) and three honest ones."""
    return [
        store_evaluated(db, GELU, variant(i), x, label=f"grpo-s0-{i}")
        for i, x in enumerate((8.0, 1.5, 2.0, 3.0))
    ]


def test_with_no_judge_a_suspicious_reward_is_held_and_listed(tmp_path: Path) -> None:
    with CandidateDB(tmp_path / "c.db") as db:
        ids = group(db)
        rewards = score(reward_over_stored(db, tmp_path, CFG, group_size=4), [variant(i) for i in range(4)])
        audits = db.audits()
        withheld = db.withheld()
    assert rewards[0] == pytest.approx(math.log(2.0 * 0.99))  # the median of the other three
    assert rewards[1:] == pytest.approx([math.log(x * 0.99) for x in (1.5, 2.0, 3.0)])
    [audit] = audits
    assert (audit.candidate_id, audit.task, audit.verdict, audit.action) == (
        ids[0],
        GELU.name,
        "unaudited",
        "hold",
    )
    assert audit.reasons == ("speedup 8.00x above 5.0x",) and audit.held and audit.reward > rewards[0]
    assert withheld == {ids[0]}
    step = json.loads((tmp_path / "steps.jsonl").read_text())
    assert step["held"] == [
        {"candidate_id": ids[0], "task": GELU.name, "reward": audit.reward, "counted": rewards[0]}
    ]


def test_the_held_list_survives_a_resumed_run_until_a_review(tmp_path: Path) -> None:
    replies = [variant(i) for i in range(4)]
    with CandidateDB(tmp_path / "c.db") as db:
        ids = group(db)
        first = score(reward_over_stored(db, tmp_path, CFG, group_size=4), replies)
    with CandidateDB(tmp_path / "c.db") as db:  # a resumed session: a new auditor over the same file
        again = score(reward_over_stored(db, tmp_path, CFG, group_size=4), replies, step=2)
        assert again == first and [a.candidate_id for a in db.audits()] == [ids[0]]
        assert db.audits()[0].held
        db.review_audit(ids[0], "cleared")
        cleared = score(reward_over_stored(db, tmp_path, CFG, group_size=4), replies, step=3)
        db.review_audit(ids[0], "confirmed")
        confirmed = score(reward_over_stored(db, tmp_path, CFG, group_size=4), replies, step=4)
        assert db.withheld() == {ids[0]}
    assert cleared[0] == pytest.approx(math.log(8.0 * 0.99)) and cleared[1:] == first[1:]
    assert confirmed[0] == CFG.reject


def test_a_judge_configured_later_rules_on_a_held_reward(tmp_path: Path) -> None:
    replies = [variant(i) for i in range(4)]
    with CandidateDB(tmp_path / "c.db") as db:
        ids = group(db)
        score(reward_over_stored(db, tmp_path, CFG, group_size=4), replies)
        judge = ScriptedJudge([JudgeVerdict("legit", "one fused pass")])
        rewards = score(reward_over_stored(db, tmp_path, CFG, judge=judge, group_size=4), replies, step=2)
        [audit] = db.audits()
    assert len(judge.calls) == 1 and audit.candidate_id == ids[0]
    assert (audit.verdict, audit.action, audit.judge_reason) == ("legit", "keep", "one fused pass")
    assert rewards[0] == pytest.approx(math.log(8.0 * 0.99))


def test_a_held_candidate_is_no_exemplar_until_cleared(tmp_path: Path) -> None:
    config = GRPOStageConfig()
    with CandidateDB(tmp_path / "c.db") as db:
        held = store_evaluated(db, GELU, variant(0), 8.0, label="grpo-s0-0")
        assert score(reward_over_stored(db, tmp_path, CFG, group_size=1), [variant(0)]) == [0.0]
        before = next(prompt_stream(db, [GELU], config))["parent_ids"]
        db.review_audit(held, "cleared")
        after = next(prompt_stream(db, [GELU], config))["parent_ids"]
    assert json.loads(before) == [] and json.loads(after) == [held]


def test_keep_is_still_a_choice(tmp_path: Path) -> None:
    with CandidateDB(tmp_path / "c.db") as db:
        group(db)
        reward = reward_over_stored(db, tmp_path, CFG, group_size=4, unaudited="keep")
        rewards = score(reward, [variant(i) for i in range(4)])
        assert db.audits()[0].action == "keep" and not db.withheld()
    assert rewards[0] == pytest.approx(math.log(8.0 * 0.99))


def test_dataset_export_leaves_out_a_held_reward_until_cleared(tmp_path: Path) -> None:
    from cudal1.train.datasets import read_verified

    run = RunDirectory(tmp_path / "run")
    with run.session() as db:
        remember_tasks(db, [GELU])
        ids = group(db)
        score(reward_over_stored(db, tmp_path, CFG, group_size=4), [variant(i) for i in range(4)])
    assert [v.row.id for v in read_verified([run.path])] == ids[1:]
    with run.open_db() as db:
        db.review_audit(ids[0], "cleared")
    assert [v.row.id for v in read_verified([run.path])] == ids
