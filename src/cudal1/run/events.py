"""Progress events of the long commands, one frozen class per kind: what ``optimize``, ``collect``
and the training stages tell a ``ProgressCallback`` while they run (``cli.progress`` turns them
into bars and lines, ``report.progress`` words them).

The callback is called from the thread that did the work (the search's event loop, a trainer's
callback); an exception it raises aborts the run where it is, which is how tests stand in for a
kill. Events carry plain values only, so a consumer needs nothing of the run's database.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from cudal1.run.rows import CandidateRow
from cudal1.run.selection import beats_reference, why_not_ok
from cudal1.schema import EvalResult


@dataclass(frozen=True)
class TaskPlan:
    """A task's evaluations at the start of a session: expected in all, and already dealt with."""

    total: int
    done: int


@dataclass(frozen=True)
class RunStarted:
    tasks: Mapping[str, TaskPlan]


@dataclass(frozen=True)
class Evaluated:
    """One candidate evaluated and recorded, with the task's best so far."""

    task: str
    candidate_id: int
    label: str
    round: int
    ok: bool
    speedup: float | None
    ci_low: float | None  # the interval of a verified result
    ci_high: float | None
    error: str | None  # why a result that is not ok earns nothing (``why_not_ok``)
    best_label: str | None
    best_speedup: float | None
    done: int  # the task's samples dealt with so far (evaluated or unparseable)

    @classmethod
    def of(cls, row: CandidateRow, result: EvalResult, best: CandidateRow | None, done: int) -> Evaluated:
        timing = result.timing if result.ok else None
        return cls(
            task=row.task,
            candidate_id=row.id,
            label=row.label,
            round=row.round,
            ok=result.ok,
            speedup=result.speedup,
            ci_low=timing.ci_low if timing else None,
            ci_high=timing.ci_high if timing else None,
            error=None if result.ok else why_not_ok(result),
            best_label=best.label if best else None,
            best_speedup=best.speedup if best else None,
            done=done,
        )


@dataclass(frozen=True)
class ParseFailed:
    """A reply with no usable ``ModelNew``, stored as a parse failure."""

    task: str
    round: int
    error: str
    done: int


@dataclass(frozen=True)
class RoundDone:
    task: str
    round: int


@dataclass(frozen=True)
class Stopped:
    """A budget limit was reached (``BudgetConfig`` field name); work under way still finishes."""

    reason: str


@dataclass(frozen=True)
class TaskFinal:
    """A task's re-measured best (``label`` None: nothing correct), and whether it is recommended."""

    task: str
    label: str | None
    ok: bool
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    faster: bool

    @classmethod
    def of(cls, task: str, label: str | None, result: EvalResult | None) -> TaskFinal:
        timing = result.timing if result is not None and result.ok else None
        return cls(
            task=task,
            label=label,
            ok=result is not None and result.ok,
            speedup=result.speedup if result is not None else None,
            ci_low=timing.ci_low if timing else None,
            ci_high=timing.ci_high if timing else None,
            faster=label is not None and beats_reference(label, result),
        )


@dataclass(frozen=True)
class RunDone:
    run_dir: str


@dataclass(frozen=True)
class TrainStep:
    """One logged optimizer step of a training phase (the stage, or a self-supervised round)."""

    phase: str
    step: int
    max_steps: int
    metrics: Mapping[str, float] = field(default_factory=dict)  # what the trainer logged


@dataclass(frozen=True)
class RoundJudged:
    """A self-supervised round's samples evaluated: how many are executable and correct."""

    round: int
    samples: int
    kept: int


Event = (
    RunStarted | Evaluated | ParseFailed | RoundDone | Stopped | TaskFinal | RunDone | TrainStep | RoundJudged
)
ProgressCallback = Callable[[Event], None]
