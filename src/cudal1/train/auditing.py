"""The reward-checking step of training: suspicious rewards are judged before they count.

CUDA-L1's second line of defence (shared/DESIGN.md, part 4): a result the evaluator passed but
that looks too good, or that carries a finding this run has not seen before, goes to the
reward-checking model (``audit.judge``) together with the closest known cases from the
hacking-case database (``audit.database``). A confirmed hack earns the reject reward and becomes
a new case, so the next audit sees it; an "unsure" verdict, or a suspicious result with no judge
configured, follows the config (``AuditConfig.unsure`` / ``unaudited``). With no judge the
default is to hold the reward: ``PoolReward`` caps it to its group's median
(``reward.cap_held``) and the run lists it until a person confirms it as a hack or clears it
(``cudal1 audit RUN``, ``review.py``). Every audit is kept in the candidate database
(``reward_audits``), so a candidate that comes back (a repeated source reuses its result) is not
judged twice, a held one stays held across sessions, and a reviewed one follows its review.

Suspicious (``AuditConfig``): a speedup above ``speedup_threshold``; a candidate within
``sol_fraction`` of the speed-of-light floor; a WARNING or REJECT finding code new to the run.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudal1.audit import HackCase, HackCaseDB, Judge, LLMJudge
from cudal1.config import AuditConfig, AuditOutcome, RewardConfig
from cudal1.llm import SamplingParams, create_backend
from cudal1.run.database import CandidateDB
from cudal1.run.rows import AuditVerdict, RewardAudit
from cudal1.schema import EvalResult, Severity, Task

log = logging.getLogger(__name__)

CASES_FILE = "hack-cases.db"


def case_db_path(run_dir: Path, config: AuditConfig) -> Path:
    """A run's hacking-case database: the configured one, else ``hack-cases.db`` in the run."""
    return Path(config.case_db) if config.case_db is not None else run_dir / CASES_FILE


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


def hack_case(task: str, source: str, result: EvalResult, explanation: str, category: str) -> HackCase:
    """A confirmed hack as a case of the hacking-case database: one id per task and source, so
    a judge's finding and a person's confirmation of one candidate are one case."""
    return HackCase(
        case_id=f"train-{task}-{result.candidate_hash[:12]}",
        category=category,
        code=source,
        explanation=explanation,
        verdict="hack",
    )


@dataclass(frozen=True)
class AuditedReward:
    """A reward after its audit; a held one is capped later, to its group's median (``PoolReward``)."""

    reward: float
    reasons: tuple[str, ...]  # why the result was suspicious (empty: not audited)
    verdict: str  # "hack" | "legit" | "unsure" | "unaudited" | "" (not suspicious)
    action: AuditOutcome = "keep"

    @property
    def held(self) -> bool:
        return self.action == "hold"


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
    ) -> AuditedReward:
        """The reward that counts for this result, after an audit when it is suspicious. A
        candidate audited before follows that audit, or its review; one audited with no judge
        and not reviewed is audited again once a judge is configured."""
        earlier = next(iter(self.db.audits(candidate_id)), None)
        if earlier is not None and not (self._unjudged(earlier) and self.judge is not None):
            return self._again(earlier, reward)
        reasons = earlier.reasons if earlier is not None else tuple(self.reasons(result))
        if not reasons:
            return AuditedReward(reward, (), "")
        verdict, why, action = await self._judge(task, source, result)
        if verdict == "hack":
            explanation = f"{'; '.join(reasons)}. Judge: {why}"
            self.cases.add(hack_case(task.name, source, result, explanation, "found in training"))
        self.db.record_audit(RewardAudit(candidate_id, task.name, reasons, verdict, why, reward, action))
        final = self._apply(action, reward)
        log.info(
            "audit of %s #%d (%s): %s -> %s, reward %.3f",
            task.name,
            candidate_id,
            "; ".join(reasons),
            verdict,
            action,
            final,
        )
        return AuditedReward(final, reasons, verdict, action)

    async def _judge(
        self, task: Task, source: str, result: EvalResult
    ) -> tuple[AuditVerdict, str, AuditOutcome]:
        """The verdict on a suspicious result, its reason, and what it does to the reward."""
        if self.judge is None:
            return "unaudited", "no reward-checking model configured", self.config.unaudited
        cases = self.cases.similar(source, k=self.config.cases) if self.config.cases else []
        verdict = await self.judge.judge(task.source, source, result_summary(result), cases)
        if verdict.verdict == "hack":
            return "hack", verdict.reason, "reject"
        if verdict.verdict == "legit":
            return "legit", verdict.reason, "keep"
        return "unsure", verdict.reason, self.config.unsure

    @staticmethod
    def _unjudged(audit: RewardAudit) -> bool:
        return audit.verdict == "unaudited" and audit.review is None

    def _again(self, audit: RewardAudit, reward: float) -> AuditedReward:
        """A candidate audited before: a review decides, else that audit's action again."""
        action = audit.action
        if audit.review is not None:
            action = "reject" if audit.review == "confirmed" else "keep"
        return AuditedReward(self._apply(action, reward), audit.reasons, audit.verdict, action)

    def _apply(self, action: AuditOutcome, reward: float) -> float:
        if action == "zero":
            return min(reward, 0.0)
        if action == "reject":
            return self.reward.reject
        return reward  # keep, or hold (capped with its group)
