"""The reward-checking step of training: suspicious rewards are judged before they count.

CUDA-L1's second line of defence (shared/DESIGN.md, part 4): a result the evaluator passed but
that looks too good, or that carries a finding this run has not seen before, goes to the
reward-checking model (``audit.judge``) together with the closest known cases from the
hacking-case database (``audit.database``). A confirmed hack earns the reject reward and becomes
a new case, so the next audit sees it; an "unsure" verdict, or a suspicious result with no judge
configured, follows the config (``AuditConfig.unsure`` / ``unaudited``). Every audit is kept in
the candidate database's meta table (``audit:<candidate id>``).

Suspicious (``AuditConfig``): a speedup above ``speedup_threshold``; a candidate within
``sol_fraction`` of the speed-of-light floor; a WARNING or REJECT finding code new to the run.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from cudal1.audit import HackCase, HackCaseDB, Judge, JudgeVerdict, LLMJudge
from cudal1.config import AuditConfig, RewardConfig
from cudal1.llm import SamplingParams, create_backend
from cudal1.run.database import CandidateDB
from cudal1.schema import EvalResult, Severity, Task

log = logging.getLogger(__name__)


def make_judge(config: AuditConfig) -> Judge | None:
    """The configured reward-checking model, or None when no spec is given."""
    llm = config.judge
    if llm.spec is None:
        return None
    backend = create_backend(llm.spec, **llm.options)
    return LLMJudge(
        backend, SamplingParams(temperature=llm.temperature, top_p=llm.top_p, max_tokens=llm.max_tokens)
    )


def result_summary(result: EvalResult) -> dict[str, Any]:
    """What the judge is shown of the evaluation: the measured numbers and every finding."""
    timing = result.timing
    return {
        "correct": result.correct,
        "speedup": timing.speedup if timing else None,
        "ci": [timing.ci_low, timing.ci_high] if timing else None,
        "trusted_clock_speedup": timing.wall_speedup if timing else None,
        "speed_of_light_percent": result.sol.cand_percent if result.sol else None,
        "findings": [f"{f.severity}: {f.code}: {f.message}" for f in result.findings],
    }


@dataclass(frozen=True)
class AuditOutcome:
    reward: float
    reasons: tuple[str, ...]  # why the result was suspicious (empty: not audited)
    verdict: str  # "hack" | "legit" | "unsure" | "unaudited" | "" (not suspicious)


class RewardAuditor:
    """Decides which results are suspicious, asks the judge, and applies its verdict."""

    def __init__(
        self,
        config: AuditConfig,
        reward: RewardConfig,
        judge: Judge | None,
        cases: HackCaseDB,
        db: CandidateDB,
    ) -> None:
        self.config, self.reward, self.judge, self.cases, self.db = config, reward, judge, cases, db
        self.seen_codes: set[str] = set(json.loads(db.get_meta("audit:seen_codes") or "[]"))

    def reasons(self, result: EvalResult) -> list[str]:
        out = []
        timing, cfg = result.timing, self.config
        if result.correct and timing is not None and timing.speedup > cfg.speedup_threshold:
            out.append(f"speedup {timing.speedup:.2f}x above {cfg.speedup_threshold}x")
        if result.correct and result.sol is not None and result.sol.cand_percent >= 100 * cfg.sol_fraction:
            out.append(f"at {result.sol.cand_percent:.0f}% of the speed-of-light floor")
        codes = {f.code for f in result.findings if f.severity in (Severity.WARNING, Severity.REJECT)}
        new = sorted(codes - self.seen_codes)
        if cfg.new_findings and new:
            out.append("new finding(s): " + ", ".join(new))
        if new:
            self.seen_codes |= set(new)
            self.db.set_meta("audit:seen_codes", json.dumps(sorted(self.seen_codes)))
        return out

    async def review(
        self, task: Task, source: str, result: EvalResult, reward: float, candidate_id: int
    ) -> AuditOutcome:
        """The reward that counts for this result, after an audit when it is suspicious."""
        reasons = self.reasons(result)
        if not reasons:
            return AuditOutcome(reward, (), "")
        if self.judge is None:
            verdict = JudgeVerdict("unsure", "no reward-checking model configured")
            label, policy = "unaudited", self.config.unaudited
        else:
            cases = self.cases.similar(source, k=self.config.cases) if self.config.cases else []
            verdict = await self.judge.judge(task.source, source, result_summary(result), cases)
            label, policy = verdict.verdict, self.config.unsure
        final = self._apply(verdict.verdict, policy, reward)
        if verdict.verdict == "hack":
            self.cases.add(
                HackCase(
                    case_id=f"train-{task.name}-{result.candidate_hash[:12]}",
                    category="found in training",
                    code=source,
                    explanation=f"{'; '.join(reasons)}. Judge: {verdict.reason}",
                    verdict="hack",
                )
            )
        record = {
            "reasons": reasons,
            "verdict": label,
            "reason": verdict.reason,
            "reward": reward,
            "final": final,
        }
        self.db.set_meta(f"audit:{candidate_id}", json.dumps(record))
        log.info(
            "audit of %s #%d (%s): %s -> reward %.3f",
            task.name,
            candidate_id,
            "; ".join(reasons),
            label,
            final,
        )
        return AuditOutcome(final, tuple(reasons), label)

    def _apply(self, verdict: str, policy: str, reward: float) -> float:
        if verdict == "hack":
            return self.reward.reject
        if verdict == "legit":
            return reward
        if policy == "zero":
            return min(reward, 0.0)
        if policy == "reject":
            return self.reward.reject
        return reward
