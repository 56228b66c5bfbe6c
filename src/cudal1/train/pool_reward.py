"""GRPO's reward: every completion of a generation batch goes to the evaluator pool at once.

TRL calls the reward once per generation batch (shared/research/rl-stack.md, section 1) with
the prompts, the completions and the dataset's extra columns (``task``, ``prompt_hash``,
``parent_ids``). ``PoolReward``:

1. stores every reply in the candidate database in one transaction, with the training step
   that produced it (the optimizer updates done when it was sampled; 0 is the initial policy),
   the prompt's hash and its exemplars as parents; a reply with no usable ``ModelNew`` is a
   parse failure, a source the task already has reuses that candidate and its result;
2. evaluates the new candidates together on the pool, inside the phase gate's ``evaluating()``
   (on a shared GPU nothing of the policy runs meanwhile: ``phases.py``); under a multi-process
   launch, a candidate another process stored first is waited for instead (``ranks.py``), and
   one left without a verdict (the evaluator raised) earns no reward, never ``incorrect``;
3. turns each result into the reward of ``train.reward.reward_from_result`` (parse failures and
   failed stages earn ``incorrect``, rejections ``reject``) over the task's bar
   (``reward_bar.py``: eager, or the faster of eager and torch.compile), capped by the task's
   speed-of-light time, then lets the auditor judge the suspicious ones (``auditing.py``); a
   held one (no judge) is capped to the median of the other rewards of its group
   (``reward.cap_held``) and listed in ``steps.jsonl`` and the run's database;
4. logs per-step metrics through TRL (``log_metric``: success rate, speedups, findings, group
   spread) and appends the step's rewards, verified speedups, bars and reward wall time to
   ``steps.jsonl`` in the run directory (what the learning check and the training benchmark read).

The candidates it stores feed the next prompts (``grpo.prompt_stream``): the paper's prompt-level
loop and parameter-level loop working together.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cudal1.config import RewardConfig
from cudal1.eval.pool import Pool
from cudal1.run.database import CandidateDB
from cudal1.run.rows import CandidateStatus, Provenance
from cudal1.schema import EvalResult, Task
from cudal1.search.lifecycle import evaluate_rows, store_reply
from cudal1.train.auditing import AuditedReward, RewardAuditor
from cudal1.train.phases import PhaseGate
from cudal1.train.ranks import Ranks, wait_for_rows
from cudal1.train.reward import cap_held, reward_from_result
from cudal1.train.reward_bar import RewardBars

log = logging.getLogger(__name__)

# How long a completion waits for another process's evaluation of the same source.
OTHERS_TIMEOUT_S = 3600.0


def sol_ms(result: EvalResult) -> float | None:
    """The task's speed-of-light time on the evaluating device, when the evaluator measured it."""
    if result.sol is None:
        return None
    floor = max(result.sol.bytes_floor_ms, result.sol.flops_floor_ms)
    return floor if math.isfinite(floor) and floor > 0 else None


def completion_text(completion: Any) -> str:
    """A conversational completion is a list of messages; a plain one is the text."""
    if isinstance(completion, list):
        return "".join(m.get("content", "") for m in completion if m.get("role") == "assistant")
    return str(completion)


class PoolReward:
    """An async reward function for ``GRPOTrainer``: evaluated, audited speedup rewards."""

    __name__ = "speedup"  # TRL names a reward function's metrics after its ``__name__``

    def __init__(
        self,
        db: CandidateDB,
        pool: Pool,
        tasks: Mapping[str, Task],
        reward: RewardConfig,
        auditor: RewardAuditor,
        gate: PhaseGate,
        *,
        group_size: int,
        run_id: int,
        steps_file: Path | None = None,
        ranks: Ranks | None = None,
    ) -> None:
        self.db, self.pool, self.tasks, self.reward = db, pool, tasks, reward
        self.auditor, self.gate, self.group_size, self.run_id = auditor, gate, group_size, run_id
        self.steps_file = steps_file
        self.ranks = ranks or Ranks()
        self.bars = RewardBars(db, reward.bar)

    async def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        task: Sequence[str],
        prompt_hash: Sequence[str],
        parent_ids: Sequence[str],
        trainer_state: Any = None,
        log_metric: Callable[[str, float], None] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        started = time.perf_counter()
        step = int(getattr(trainer_state, "global_step", 0) or 0)
        ids, errors = self._store(completions, task, prompt_hash, parent_ids, step)
        rows = {i: self.db.get(i) for i in set(ids)}
        pending = [r for r in rows.values() if r.status is CandidateStatus.PENDING]
        # Under a multi-process launch a source another process stored first is evaluated there.
        ours = f"grpo-s{step}-{self.ranks.label_prefix()}"
        mine = [r for r in pending if not self.ranks.several or r.label.startswith(ours)]
        theirs = [r.id for r in pending if self.ranks.several and not r.label.startswith(ours)]
        with self.gate.evaluating():
            await evaluate_rows(self.db, self.pool, self.tasks, mine)
        await wait_for_rows(self.db, theirs, timeout_s=OTHERS_TIMEOUT_S)
        results = [self.db.get(i).result if e is None else None for i, e in zip(ids, errors, strict=True)]
        # A candidate still pending has no verdict (the evaluator raised, or another process's
        # evaluation of it never came back): no reward, as for an evaluator error.
        unjudged = [e is None and r is None for e, r in zip(errors, results, strict=True)]
        audited = [
            None if u else await self._reward(i, r) for i, r, u in zip(ids, results, unjudged, strict=True)
        ]
        held = [a is not None and a.held for a in audited]
        rewards = cap_held([None if a is None else a.reward for a in audited], held, self.group_size)
        extra = {
            "reward_wall_s": time.perf_counter() - started,
            "fresh_evaluations": len(pending),
            "reward_bar": self.reward.bar,
            "bars": {name: dataclasses.asdict(self.bars.bar(name)) for name in sorted(set(task))},
            "held": [
                {"candidate_id": i, "task": name, "reward": a.reward, "counted": r}
                for i, name, a, r, h in zip(ids, task, audited, rewards, held, strict=True)
                if h and a is not None
            ],
        }
        self._log(step, rewards, results, errors, log_metric, extra)
        return rewards

    async def _reward(self, cand_id: int, result: EvalResult | None) -> AuditedReward | None:
        """One completion's reward over its task's bar, after the audit (None: no reward)."""
        if result is None:  # a parse failure
            return AuditedReward(self.reward.incorrect, (), "")
        if result.evaluator_error:
            # The trusted side failed twice (eval/pool.py retries once alone): no verdict on the
            # completion, so no reward; TRL skips a None reward for that sample.
            return None
        bar = self.bars.bar(result.task)
        value = reward_from_result(result, self.reward, sol_ms=sol_ms(result), bar=bar.speedup)
        row = self.db.get(cand_id)
        return await self.auditor.review(self.tasks[row.task], row.source, result, value, cand_id)

    def _store(
        self,
        completions: Sequence[Any],
        tasks: Sequence[str],
        hashes: Sequence[str],
        parents: Sequence[str],
        step: int,
    ) -> tuple[list[int], list[str | None]]:
        ids: list[int] = []
        errors: list[str | None] = []
        with self.db.transaction():  # a kill leaves all of the batch's replies or none
            for i, (completion, name, phash, parent_json) in enumerate(
                zip(completions, tasks, hashes, parents, strict=True)
            ):
                prov = Provenance(
                    round=0,
                    parent_ids=tuple(json.loads(parent_json or "[]")),
                    prompt_hash=phash,
                    backend="policy",
                    model="grpo",
                    run_id=self.run_id,
                    step=step,
                )
                text = completion_text(completion)
                label = f"grpo-s{step}-{self.ranks.label_prefix()}{i}"
                cand_id, error = store_reply(self.db, self.tasks[name], text, prov, label=label)
                ids.append(cand_id)
                errors.append(error)
        return ids, errors

    def _log(
        self,
        step: int,
        rewards: list[float | None],
        results: list[EvalResult | None],
        errors: list[str | None],
        log_metric: Callable[[str, float], None] | None,
        extra: dict[str, Any],
    ) -> None:
        metrics = step_metrics(rewards, results, errors, self.group_size)
        if log_metric is not None:
            for name, value in metrics.items():
                if value is not None:
                    log_metric(f"cudal1/{name}", value)
        log.info(
            "step %d: reward mean %.3f, success %.2f, parse failures %d/%d, held %d",
            step,
            metrics["reward_mean"],
            metrics["success_rate"],
            sum(e is not None for e in errors),
            len(errors),
            len(extra["held"]),
        )
        if self.steps_file is not None:
            speedups = [r.speedup for r in results if r is not None and r.speedup is not None]
            # ``reward_wall_s`` ends at ``time``: benchmarks/training.py reads when the policy's GPU
            # waited for rewards
            record = {
                "step": step,
                "time": time.time(),
                "rewards": rewards,
                "speedups": speedups,
                **extra,
                **metrics,
            }
            with self.steps_file.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")


def step_metrics(
    all_rewards: list[float | None],
    results: list[EvalResult | None],
    errors: list[str | None],
    group_size: int,
) -> dict[str, Any]:
    """What one generation batch did: rewards (evaluator errors, which have none, left out),
    verdicts, verified speedups, group spread."""
    n = max(len(all_rewards), 1)
    rewards = [r for r in all_rewards if r is not None]
    verified = [r for r in results if r is not None and r.correct and not r.rejected]
    speedups = sorted(r.speedup for r in verified if r.speedup is not None)
    groups = [
        [r for r in all_rewards[i : i + group_size] if r is not None]
        for i in range(0, len(all_rewards), group_size)
    ]
    groups = [g for g in groups if g]
    return {
        "reward_mean": statistics.fmean(rewards) if rewards else 0.0,
        "group_reward_spread": statistics.fmean(max(g) - min(g) for g in groups) if groups else 0.0,
        "success_rate": len(verified) / n,
        "parse_failure_rate": sum(e is not None for e in errors) / n,
        "reject_rate": sum(r is not None and r.rejected for r in results) / n,
        "findings_per_sample": sum(len(r.findings) for r in results if r is not None) / n,
        "speedup_mean": statistics.fmean(speedups) if speedups else None,
        "speedup_median": statistics.median(speedups) if speedups else None,
        "speedup_max": speedups[-1] if speedups else None,
    }
