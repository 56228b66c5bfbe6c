"""Where a speedup is shown, a speedup that a trusted clock decided says so (issue 22, item 2):
``cudal1 eval``'s timing table, ``cudal1 verify``'s progress lines, rows and summary, and the run
summary of ``optimize`` / ``runs show``."""

from __future__ import annotations

import dataclasses

from rich.console import Console, RenderableType

from cudal1.report.runs import RunSummary, TaskSummary, render_run_markdown, run_table
from cudal1.report.terminal import render_eval_markdown, render_eval_result
from cudal1.report.verify import progress_line, rows_table, summarize, summary_table
from cudal1.schema import (
    Candidate,
    Correctness,
    EvalResult,
    Finding,
    Severity,
    Stage,
    StageRecord,
    Task,
    Timing,
)
from cudal1.search.verify import row_for


def render(renderable: RenderableType, width: int = 140) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def _result(clock: str, speedup: float, events: float) -> EvalResult:
    timing = Timing(
        "cuda:0", 48, (0.0212,) * 3, (0.0206,) * 3, (0.03,) * 3, (0.036,) * 3, speedup, speedup * 0.97,
        speedup * 1.03, speedup, "budget", launch_speedup=1.0, clock=clock,  # type: ignore[arg-type]
        event_speedup=events, event_ci_low=events * 0.99, event_ci_high=events * 1.01,
    )  # fmt: skip
    findings = ()
    if clock != "events":
        findings = (Finding("clock_disagreement", Severity.WARNING, Stage.INTEGRITY, "both figures", {}),)
    return EvalResult(
        "L3_1", "h", "cuda:0",
        stages=(StageRecord(Stage.CORRECTNESS, True, 1.0), StageRecord(Stage.TIMING, True, 2.0)),
        correctness=Correctness(3, 3, 1e-6, 0.1, 1.0, "float64"), timing=timing, findings=findings,
    )  # fmt: skip


def test_eval_output_names_the_clock_and_keeps_the_events_figure() -> None:
    fallback = render(render_eval_result(_result("launch_wall", 0.826, 1.03)))
    assert (
        "speedup 0.826x decided by the trusted clock on the short-lead pairs; the worker clocks read 1.030x"
        in fallback
    )
    assert "worker-clock" in fallback and "95% CI [1.020, 1.040]" in fallback
    assert "trusted clock on the short-lead pairs" in render_eval_markdown(
        _result("launch_wall", 0.826, 1.03)
    )
    plain = render(render_eval_result(_result("events", 1.03, 1.03)))
    assert "speedup 1.030x decided by the worker clocks (CUDA events on a GPU)" in plain
    assert "worker-clock" not in plain


def test_verify_rows_progress_and_summary_say_which_clock_decided() -> None:
    task = Task("L3_1", "src", level=3)
    cand = Candidate("L3_1", "x", claimed_speedup=1.1)
    fallback = row_for(0, task, cand, _result("launch_wall", 0.826, 1.03))
    plain = row_for(1, dataclasses.replace(task, name="L1_2"), cand, _result("events", 1.01, 1.01))
    assert (fallback.clock, fallback.events) == ("launch_wall", 1.03)
    line = progress_line(1, 2, fallback)
    assert (
        "measured 0.826x" in line
        and "by the trusted clock on the short-lead pairs; the events' 1.030x" in line
    )
    assert "by the" not in progress_line(2, 2, plain)
    table = rows_table([fallback, plain])
    measured = {row[2]: row[5] for row in table.plain_rows()}
    assert measured == {"L3_1": "0.826x*", "L1_2": "1.010x"}
    assert "decided by the trusted clock" in table.caption
    assert rows_table([plain]).caption == ""
    s = summarize([fallback, plain])
    assert s.clocks == {"events": 1, "launch_wall": 1}
    assert ["measured records by deciding clock", "", "", "events 1, launch_wall 1"] in summary_table(
        s
    ).plain_rows()


def _task(name: str, clock: str | None) -> TaskSummary:
    return TaskSummary(
        task=name, level=3, outcome="faster", best_id=7, best_label="cuda-graph", speedup=1.2, ci_low=1.1,
        ci_high=1.3, correct=True, ref_ms=1.0, cand_ms=0.8, final=True, search_speedup=1.2, evaluated=3,
        correct_count=3, parse_failed=0, pending=0, rounds_done=1, clock=clock,  # type: ignore[arg-type]
    )  # fmt: skip


def _summary(*tasks: TaskSummary) -> RunSummary:
    return RunSummary(
        "runs/x", None, 0, 1, "cuda:0", "H100", 0, 0, 0, 0.0, 1.0, 1.0, None, True, tasks
    )  # fmt: skip


def test_run_summary_marks_a_speedup_a_trusted_clock_decided() -> None:
    table = run_table(_summary(_task("a", "wall"), _task("b", "events")))
    speedups = {row[0]: row[3] for row in table.plain_rows()}
    assert speedups["a"].startswith("1.200x*") and speedups["b"].startswith("1.200x ")
    assert "decided by the trusted clock" in table.caption
    assert "decided by the trusted clock" not in run_table(_summary(_task("b", "events"))).caption
    assert "1.200x*" in render_run_markdown(_summary(_task("a", "wall")))
    again = RunSummary.from_dict(_summary(_task("a", "wall")).to_dict())
    assert again.tasks[0].clock == "wall"
