"""``runs show`` of a run whose task never got a result (killed, or stopped by its budget before
that task's turn): the task reads "not evaluated", not "kept reference 1.000x", which would say
that the reference was measured and kept."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console, RenderableType

from cudal1.config import OptimizeConfig
from cudal1.report.runs import render_run_markdown, render_run_summary, summarize_run
from cudal1.run.records import RunRecord, TaskRecord
from cudal1.run.rows import TaskCounts
from cudal1.run.throughput import run_throughput

NOTHING = TaskCounts(total=3, pending=3, evaluated=0, parse_failed=0, correct=0, ok=0, faster=0)
FAILED = TaskCounts(total=3, pending=0, evaluated=3, parse_failed=0, correct=0, ok=0, faster=0)


def _run(*tasks: TaskRecord) -> RunRecord:
    ledger = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}
    throughput = run_throughput([], 1.0)
    return RunRecord(Path("runs/x"), OptimizeConfig(), None, ledger, 0.0, 1.0, None, False, tasks, throughput)


def _task(name: str, counts: TaskCounts) -> TaskRecord:
    return TaskRecord(name, 1, best=None, final=None, first_result=None, counts=counts, rounds_done=0)


def render(renderable: RenderableType) -> str:
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def test_a_task_never_evaluated_reads_not_evaluated() -> None:
    summary = summarize_run(_run(_task("5_gelu", NOTHING)))
    assert summary.tasks[0].outcome == "not evaluated"
    row = next(line for line in render(render_run_summary(summary)).splitlines() if "5_gelu" in line)
    assert "not evaluated" in row
    assert "reference" not in row and "1.000x" not in row
    assert "3 pending" in row
    md = next(line for line in render_run_markdown(summary).splitlines() if "5_gelu" in line)
    assert "not evaluated" in md and "1.000x" not in md


def test_a_task_whose_candidates_all_failed_keeps_the_reference() -> None:
    summary = summarize_run(_run(_task("3_softmax", FAILED)))
    assert summary.tasks[0].outcome == "no correct variant"
    row = next(line for line in render(render_run_summary(summary)).splitlines() if "3_softmax" in line)
    assert "reference" in row and "1.000x" in row
