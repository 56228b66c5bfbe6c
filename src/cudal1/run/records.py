"""A run read back from its directory: ``load_run`` returns a ``RunRecord`` with one ``TaskRecord``
per task, what ``runs show``, ``report`` and a finished ``optimize`` summarise (``report.runs``).

A task keeps the reference unless its kept candidate beat it beyond its interval on the reported
measurement (``TaskRecord.faster``): the final re-evaluation's when the task has one, else the
search's. Reading works on a finished, running or killed run alike, and on a GRPO run (what its
completions found, and the bar its reward counted speedups over).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudal1.config import ConfigError, GRPOStageConfig, OptimizeConfig, RewardBar
from cudal1.run.database import CandidateDB
from cudal1.run.directory import (
    RunDirectory,
    RunError,
    every_final,
    failed_finals,
    passed_finals,
    stored_tasks,
)
from cudal1.run.rows import CandidateRow, TaskCounts
from cudal1.run.selection import beats_reference, choose_kept, why_not_ok
from cudal1.run.throughput import Throughput, run_throughput
from cudal1.schema import EvalResult


@dataclass(frozen=True)
class TaskRecord:
    """What a run holds for one task; ``report.runs.summarize_run`` turns it into a summary row."""

    name: str
    level: int
    best: CandidateRow | None  # ``choose_kept``: the best of the candidates that did not fail a final
    final: EvalResult | None  # the final re-evaluation of ``best``, when it has one
    first_result: EvalResult | None  # the task's first stored result (its device, when ``best`` has none)
    counts: TaskCounts
    rounds_done: int
    # Round 0's built-in baselines and the reference anchor, by label: what ``cudal1 report``
    # compares the kept kernel against (same device, same run); a baseline re-measured in a
    # final (the kept kernel was compared with it there) by that final, passed or failed.
    baselines: tuple[tuple[str, EvalResult], ...] = ()
    # Faster candidates that failed their final re-evaluation and are not kept: (label, why).
    failed_finals: tuple[tuple[str, str], ...] = ()

    @property
    def measured(self) -> EvalResult | None:
        """The measurement the task reports: the final re-evaluation's, else the search's."""
        if self.final is not None:
            return self.final
        return self.best.result if self.best is not None else None

    @property
    def faster(self) -> bool:
        """Whether the run recommends ``best`` (``beats_reference`` on its reported measurement);
        otherwise the task keeps the reference."""
        return self.best is not None and beats_reference(self.best.label, self.measured)


@dataclass(frozen=True)
class RunRecord:
    """A run as its directory holds it: config, LLM spend, bookkeeping and every task's state."""

    run_dir: Path
    config: OptimizeConfig | None  # None: a GRPO run, which has no search config
    llm: str | None  # the backend that ran (``prefix:model``), else the configured spec
    ledger: dict[str, Any]  # ``ledger_totals`` of the run's ledger file
    gpu_seconds: float  # ``device_held_seconds`` over every stored result, final re-evaluations included
    wall_s: float
    stop_reason: str | None
    complete: bool
    tasks: tuple[TaskRecord, ...]
    throughput: Throughput  # over every stored result, final re-evaluations included
    reward_bar: RewardBar | None = None  # a GRPO run's: what its reward counted speedups over


def load_run(path: Path) -> RunRecord:
    """The run as its directory holds it now (so a running or killed run shows its progress)."""
    run = RunDirectory(path)
    config, reward_bar = _configs(run)
    with run.open_db() as db:
        return read_run(run, db, config, reward_bar)


def _configs(run: RunDirectory) -> tuple[OptimizeConfig | None, RewardBar | None]:
    """A search run's config, or a GRPO run's reward bar; RunError for any other config."""
    try:
        return run.read_config(OptimizeConfig), None
    except ConfigError as search:
        try:
            return None, run.read_config(GRPOStageConfig).reward.bar
        except ConfigError:
            problems = "; ".join(search.problems)
            raise RunError(f"{run.config_file}: not a search or GRPO run's config: {problems}") from None


def read_run(
    run: RunDirectory, db: CandidateDB, config: OptimizeConfig | None, reward_bar: RewardBar | None = None
) -> RunRecord:
    """The run as it stands in its database, ledger and config."""
    stored = stored_tasks(db)
    tasks = task_records(db)
    finals = [f for name in stored for f in every_final(db, name).values()]
    results = [r.result for name in stored for r in db.evaluated(name) if r.result] + finals
    wall_s = float(db.get_meta("wall_s") or 0.0)
    throughput = run_throughput(results, wall_s)
    return RunRecord(
        run_dir=run.path,
        config=config,
        llm=db.get_meta("llm") or (config.llm.spec if config is not None else None),
        ledger=run.ledger_totals(),
        gpu_seconds=throughput.held_s,
        wall_s=wall_s,
        stop_reason=db.get_meta("stop_reason") or None,
        complete=db.get_meta("complete") == "1",
        tasks=tasks,
        throughput=throughput,
        reward_bar=reward_bar,
    )


def task_records(db: CandidateDB) -> tuple[TaskRecord, ...]:
    """Every task of a run (of any stage: its config is not read), as its database holds it."""
    return tuple(_task_record(db, name, task.level) for name, task in stored_tasks(db).items())


def _task_record(db: CandidateDB, name: str, level: int) -> TaskRecord:
    evaluated = db.evaluated(name)
    failed = failed_finals(db, name)
    passed = passed_finals(db, name)
    finals = {**passed, **failed}
    best = choose_kept(evaluated, failed, passed)
    labels = {r.id: r.label for r in evaluated}
    return TaskRecord(
        name=name,
        level=level,
        best=best,
        final=passed.get(best.id) if best is not None else None,
        first_result=next((r.result for r in evaluated if r.result), None),
        counts=db.counts(name),
        rounds_done=db.rounds_done(name),
        baselines=tuple(
            (r.label, finals.get(r.id) or r.result)
            for r in evaluated
            if r.round == 0 and r.result is not None
        ),
        failed_finals=tuple(
            (labels.get(i, str(i)), why_not_ok(result)) for i, result in failed.items()
        ),
    )
