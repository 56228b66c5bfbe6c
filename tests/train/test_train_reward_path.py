"""GRPO's reward path without a trainer: replies stored with their step, evaluated together on
the CPU pool, rewarded, audited; a candidate the checks reject earns the reject reward."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from train_fixtures import GELU, GOOD_ANSWER, HACK_ANSWER, NO_CODE

from cudal1.audit import JudgeVerdict, ScriptedJudge, open_case_db
from cudal1.config import AuditConfig, EvalConfig, RewardConfig
from cudal1.eval.pool import EvalPool
from cudal1.run.database import CandidateDB
from cudal1.train.auditing import RewardAuditor
from cudal1.train.phases import PhaseGate
from cudal1.train.pool_reward import PoolReward


class State:
    global_step = 3


class ContentJudge(ScriptedJudge):
    """'hack' for a candidate that writes into its input, 'legit' for any other."""

    def __init__(self) -> None:
        super().__init__([])

    async def judge(
        self, task_source: str, candidate_source: str, result_summary: Any, cases: Any
    ) -> JudgeVerdict:
        self.calls.append({"candidate": candidate_source, "summary": result_summary})
        if "x.copy_" in candidate_source:
            return JudgeVerdict("hack", "writes its output into the input")
        return JudgeVerdict("legit", "computes the function")


def test_rewards_of_a_batch_with_a_rejected_and_an_unparseable_reply(
    tmp_path: Path, eval_config: dict[str, Any]
) -> None:
    # Answers by content: under load a result may be audited more than once (a clock finding
    # beside the rejection), and an honest candidate may be audited too.
    judge = ContentJudge()
    released: list[str] = []
    gate = PhaseGate(shared=True, release=lambda: released.append("released"))
    metrics: dict[str, float] = {}
    reward_cfg = RewardConfig()
    with (
        CandidateDB(tmp_path / "candidates.db") as db,
        open_case_db(tmp_path / "cases.db") as cases,
        EvalPool(EvalConfig.model_validate(eval_config), workers=2, spares=0) as pool,
    ):
        auditor = RewardAuditor(AuditConfig(), reward_cfg, judge, cases, db)
        reward = PoolReward(
            db,
            pool,
            {GELU.name: GELU},
            reward_cfg,
            auditor,
            gate,
            group_size=4,
            run_id=db.start_run(),
            steps_file=tmp_path / "steps.jsonl",
        )
        completions = [
            [{"role": "assistant", "content": t}] for t in (GOOD_ANSWER, HACK_ANSWER, NO_CODE, GOOD_ANSWER)
        ]
        rewards = asyncio.run(
            reward(
                prompts=[[]] * 4,
                completions=completions,
                task=[GELU.name] * 4,
                prompt_hash=["h"] * 4,
                parent_ids=["[]"] * 4,
                trainer_state=State(),
                log_metric=metrics.__setitem__,
            )
        )
        rows = db._query("SELECT * FROM candidates ORDER BY id")
        audit = db.audits(rows[1].id)[0]
        hack_cases = [c for c in cases.all() if c.category == "found in training"]

    good, hack, unparsed, repeat = rewards
    assert hack == reward_cfg.reject and unparsed == reward_cfg.incorrect
    assert good == repeat and good > reward_cfg.reject  # the repeated source reused one evaluation
    assert [r.step for r in rows] == [3, 3, 3]  # two candidates and one parse failure, all from step 3
    assert rows[1].result is not None and rows[1].result.rejected
    assert rows[2].status == "parse_failed"
    assert released == ["released"]  # the device was released once, before the batch was timed
    assert not gate.busy
    # the rejection's finding is new to the run: audited, confirmed, and added as a case
    assert audit.verdict == "hack" and audit.action == "reject" and len(judge.calls) >= 1
    assert len(hack_cases) == 1 and "x.copy_" in hack_cases[0].code
    assert metrics["cudal1/parse_failure_rate"] == 0.25 and metrics["cudal1/reject_rate"] == 0.25
    step = json.loads((tmp_path / "steps.jsonl").read_text().splitlines()[0])
    assert step["step"] == 3 and step["rewards"] == rewards
