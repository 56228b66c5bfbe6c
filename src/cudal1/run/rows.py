"""The candidate database's rows as typed values: a candidate's status and provenance, a stored
candidate, a reward's audit and a task's counts. What ``run.database`` writes and reads back;
the tables behind them are ``run.migrations``.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from typing import Any, Literal

from cudal1.config import AuditOutcome
from cudal1.schema import EvalResult


class CandidateStatus(StrEnum):
    PENDING = "pending"  # stored, not yet evaluated: a resumed run evaluates these first
    EVALUATED = "evaluated"
    PARSE_FAILED = "parse_failed"  # the reply held no usable code; never evaluated


@dataclass(frozen=True)
class Provenance:
    """Where a candidate came from: the run, round, prompt, parents and model that produced it."""

    round: int = 0
    parent_ids: tuple[int, ...] = ()  # candidates shown as exemplars in the prompt
    prompt_hash: str | None = None
    backend: str = ""  # "baseline", "openai", "hf", "scripted", ...
    model: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    run_id: int | None = None
    step: int | None = None  # the training step whose generation produced it (None outside training)
    # The chain that produced it, read left to right: "seed cuda-l1:h100 > torch-compile-default".
    origin: str = ""
    base_id: int | None = None  # the candidate a built-in transform was applied to
    claimed_speedup: float | None = None  # what a seed's source claimed (measured elsewhere)


@dataclass(frozen=True)
class CandidateRow:
    """One row of ``candidates``; ``result`` is parsed from its JSON only when first read."""

    id: int
    run_id: int | None
    task: str
    task_hash: str
    label: str
    source: str
    source_hash: str
    parent_ids: tuple[int, ...]
    prompt_hash: str | None
    backend: str
    model: str
    round: int
    prompt_tokens: int | None
    completion_tokens: int | None
    created_at: str
    evaluated_at: str | None
    status: CandidateStatus
    result_json: str | None
    speedup: float | None
    correct: bool | None
    analysis: str
    parse_error: str | None
    final: bool
    step: int | None = None
    origin: str = ""
    base_id: int | None = None
    claimed_speedup: float | None = None

    @cached_property
    def result(self) -> EvalResult | None:
        return EvalResult.from_dict(json.loads(self.result_json)) if self.result_json else None

    @classmethod
    def from_sqlite(cls, row: sqlite3.Row) -> CandidateRow:
        d = dict(row)
        d["result_json"] = d.pop("result")
        d["parent_ids"] = tuple(json.loads(d["parent_ids"]))
        d["status"] = CandidateStatus(d["status"])
        d["correct"] = None if d["correct"] is None else bool(d["correct"])
        d["final"] = bool(d["final"])
        return cls(**d)


AuditVerdict = Literal["hack", "legit", "unsure", "unaudited"]  # the judge's, or no judge
Review = Literal["confirmed", "cleared"]


@dataclass(frozen=True)
class RewardAudit:
    """One suspicious reward's audit (``train.auditing``) and a person's review of it
    (``cudal1 audit``)."""

    candidate_id: int
    task: str
    reasons: tuple[str, ...]  # why the result was suspicious
    verdict: AuditVerdict
    judge_reason: str
    reward: float  # before the audit
    action: AuditOutcome  # what the audit did with the reward
    audited_at: str = ""
    review: Review | None = None
    reviewed_at: str | None = None

    @classmethod
    def from_sqlite(cls, row: sqlite3.Row) -> RewardAudit:
        d: dict[str, Any] = dict(row)
        d["reasons"] = tuple(json.loads(d["reasons"]))
        return cls(**d)

    @property
    def held(self) -> bool:
        """Waiting for a review (capped to its group's median meanwhile)."""
        return self.action == "hold" and self.review is None

    @property
    def counts_in_full(self) -> bool:
        """Kept by the audit, or cleared by a review: the reward counts as measured."""
        return self.review == "cleared" or (self.review is None and self.action == "keep")


@dataclass(frozen=True)
class TaskCounts:
    total: int
    pending: int
    evaluated: int
    parse_failed: int
    correct: int
    ok: int  # correct, timed and not rejected: has an effective speedup
    faster: int  # effective speedup > 1.01, the paper's "count over 1.01x"

    @property
    def dealt_with(self) -> int:
        """Samples evaluated or found unparseable: a progress bar's position."""
        return self.evaluated + self.parse_failed
