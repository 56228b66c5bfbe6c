"""An optimisation run's summary: built from what the run holds (``summarize_run``), and its rich
rendering (a header with device, model and spend, then one row per task).

``summarize_run`` is pure: ``search.optimize`` reads the run directory into a ``RunRecord``; this
module decides which numbers a task reports (the final re-evaluation's, when there is one).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from cudal1.schema import EvalResult
from cudal1.search.contrastive import REFERENCE_LABEL
from cudal1.search.optimize import RunRecord, TaskRecord

# The paper counts a task as improved above 1.01x (shared/research/cuda-l1-method.md).
FASTER = 1.01


@dataclass(frozen=True)
class TaskSummary:
    """A task's outcome; speedup, interval and times come from the final re-evaluation when ``final``."""

    task: str
    level: int
    best_id: int | None
    best_label: str | None
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    correct: bool
    ref_ms: float | None
    cand_ms: float | None
    final: bool
    search_speedup: float | None
    evaluated: int
    correct_count: int
    parse_failed: int
    pending: int
    rounds_done: int


@dataclass(frozen=True)
class RunSummary:
    run_dir: str
    llm: str | None
    rounds: int
    samples: int
    device: str | None
    gpu: str | None
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    gpu_seconds: float
    wall_s: float
    stop_reason: str | None
    complete: bool
    tasks: tuple[TaskSummary, ...]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSummary:
        return cls(**{**d, "tasks": tuple(TaskSummary(**t) for t in d["tasks"])})


def _task_summary(t: TaskRecord) -> tuple[TaskSummary, EvalResult | None]:
    """The task's row, and the result that shows its device (the reported one, else any)."""
    best = t.best
    result = t.final if t.final is not None else (best.result if best else None)
    timing = result.timing if result is not None and result.ok else None
    summary = TaskSummary(
        task=t.name,
        level=t.level,
        best_id=best.id if best else None,
        best_label=best.label if best else None,
        speedup=result.speedup if result else None,
        ci_low=timing.ci_low if timing else None,
        ci_high=timing.ci_high if timing else None,
        correct=bool(result and result.correct),
        ref_ms=timing.ref_median_ms if timing else None,
        cand_ms=timing.cand_median_ms if timing else None,
        final=t.final is not None,
        search_speedup=best.speedup if best else None,
        evaluated=t.counts.evaluated,
        correct_count=t.counts.correct,
        parse_failed=t.counts.parse_failed,
        pending=t.counts.pending,
        rounds_done=t.rounds_done,
    )
    return summary, result or t.first_result


def summarize_run(run: RunRecord) -> RunSummary:
    """The run's summary: one row per task, the run's device, LLM spend and bookkeeping."""
    rows, results = [], []
    for task in run.tasks:
        summary, result = _task_summary(task)
        rows.append(summary)
        if result is not None:
            results.append(result)
    env = next((r for r in results if r.environment.get("gpu")), results[0] if results else None)
    return RunSummary(
        run_dir=str(run.run_dir),
        llm=run.llm,
        rounds=run.config.rounds,
        samples=run.config.samples,
        device=env.device if env else None,
        gpu=env.environment.get("gpu") if env else None,
        llm_calls=run.ledger["calls"],
        prompt_tokens=run.ledger["prompt_tokens"],
        completion_tokens=run.ledger["completion_tokens"],
        cost_usd=run.ledger["cost_usd"],
        gpu_seconds=run.gpu_seconds,
        wall_s=run.wall_s,
        stop_reason=run.stop_reason,
        complete=run.complete,
        tasks=tuple(rows),
    )


def render_run_json(summary: RunSummary) -> str:
    """``summary`` as the JSON of ``summary.json`` and ``cudal1 runs show --json``."""
    return json.dumps(summary.to_dict(), indent=2) + "\n"


def fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _speedup(t: TaskSummary) -> Text:
    if t.speedup is None:
        return Text("-", style="dim")
    style = "green" if t.speedup > FASTER else ("red" if t.speedup < 1 / FASTER else "")
    return Text(f"{t.speedup:.3f}x", style=style)


def render_run_header(s: RunSummary) -> Table:
    status = "complete" if s.complete else "incomplete (resume with --resume)"
    if s.stop_reason:
        status += f", stopped by {s.stop_reason}"
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("run", s.run_dir)
    grid.add_row("status", status)
    grid.add_row("device", f"{s.device or '-'}  (GPU: {s.gpu or '-'})")
    grid.add_row(
        "proposer", f"{s.llm}, {s.rounds} rounds x {s.samples} samples" if s.llm else "built-in baselines"
    )
    tokens = s.prompt_tokens + s.completion_tokens
    grid.add_row(
        "LLM",
        f"{s.llm_calls} calls, {tokens:,} tokens ({s.prompt_tokens:,} prompt, {s.completion_tokens:,} completion),"
        f" ${s.cost_usd:.2f}",
    )
    grid.add_row("time", f"{s.wall_s:.0f} s wall, {s.gpu_seconds:.0f} s on the timing device")
    return grid


def render_run_table(s: RunSummary) -> Table:
    faster = sum(
        1 for t in s.tasks if t.speedup is not None and t.speedup > FASTER and t.best_label != REFERENCE_LABEL
    )
    table = Table(
        title=f"{len(s.tasks)} task{'' if len(s.tasks) == 1 else 's'}, {faster} faster than the reference (>{FASTER}x)",
        box=box.SIMPLE_HEAD,
        caption="speedup, CI and times from the final re-evaluation; (search): not re-evaluated yet",
    )
    table.add_column("task", no_wrap=True, min_width=max((len(t.task) for t in s.tasks), default=4))
    table.add_column("lvl", justify="right")
    table.add_column("best")
    table.add_column("speedup [95% CI]", justify="right")
    table.add_column("correct", justify="center")
    for col in ("ref ms", "best ms", "evaluated", "#correct"):
        table.add_column(col, justify="right")
    for t in s.tasks:
        label = t.best_label or "-"
        if t.best_label and not t.final:
            label += " (search)"
        speedup = _speedup(t)
        if t.ci_low is not None and t.ci_high is not None:
            speedup.append(f" [{t.ci_low:.2f}, {t.ci_high:.2f}]", style="dim")
        table.add_row(
            t.task,
            str(t.level),
            label,
            speedup,
            Text("yes", style="green") if t.correct else Text("no", style="red"),
            fmt_ms(t.ref_ms),
            fmt_ms(t.cand_ms),
            str(t.evaluated) + (f" (+{t.pending} pending)" if t.pending else ""),
            str(t.correct_count),
        )
    return table


def render_run_summary(s: RunSummary) -> Group:
    return Group(render_run_header(s), Text(""), render_run_table(s))
