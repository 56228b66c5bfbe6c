"""The A-vs-A check of a run (issue 22, item 3): the reference anchor's interval per task, how
many contain 1.0, half-widths against the goal, and the clocks that decided."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from candidate_fixtures import make_result
from rich.console import Console

from cudal1.config import OptimizeConfig
from cudal1.report.a_vs_a import (
    AvsAEntry,
    AvsASummary,
    a_vs_a_line,
    a_vs_a_table,
    anchor_entry,
    summarize_a_vs_a,
)
from cudal1.report.runs import RunSummary, render_run_markdown, render_run_summary, summarize_run
from cudal1.run.records import RunRecord, TaskRecord
from cudal1.run.rows import TaskCounts
from cudal1.run.selection import REFERENCE_LABEL
from cudal1.run.throughput import run_throughput

DONE = TaskCounts(total=1, pending=0, evaluated=1, parse_failed=0, correct=1, ok=1, faster=0)


def _anchor(speedup: float, half: float, ref_ms: float, clock: str = "events") -> AvsAEntry:
    return AvsAEntry("t", speedup, speedup * (1 - half), speedup * (1 + half), ref_ms, clock, speedup)  # type: ignore[arg-type]


def test_intervals_that_contain_one_and_the_goal_by_kernel_time() -> None:
    entries = [
        _anchor(1.004, 0.008, 0.5),  # contains 1.0, ±0.8% on a 0.5 ms kernel: meets the 1% goal
        _anchor(1.004, 0.015, 0.5),  # contains 1.0 but ±1.5% on a slow kernel: misses the goal
        _anchor(1.02, 0.025, 0.02),  # contains 1.0, ±2.5% under 0.1 ms: meets the 3% goal
        dataclasses.replace(_anchor(0.826, 0.04, 0.021, "launch_wall"), event_speedup=1.03),  # excludes 1.0
        AvsAEntry("u", status="not evaluated"),
    ]
    s = summarize_a_vs_a(entries)
    assert (s.measured, s.contain_one, s.meet_goal) == (4, 3, 2)
    assert s.median_half_width == pytest.approx(0.02) and s.max_half_width == pytest.approx(0.04)
    assert s.clocks == {"events": 3, "launch_wall": 1}
    line = a_vs_a_line(s)
    assert line.startswith("A-vs-A (the reference as its own candidate): 3/4 intervals contain 1.0;")
    assert "half-width median 2.0%, max 4.0%" in line and "2/4 meet the goal" in line
    assert "clock: events 3, launch_wall 1" in line and "1 not measured" in line
    rows = a_vs_a_table(s).plain_rows()
    assert rows[3][5] == "NO" and rows[3][6] == "launch_wall" and rows[3][7] == "1.030x"
    assert rows[4][2] == "not evaluated"
    assert AvsASummary.from_dict(s.to_dict()) == s


def test_an_anchor_entry_from_a_stored_result() -> None:
    ok = anchor_entry("t", make_result("t", "src", 1.0))
    assert ok.contains_one and ok.clock == "events" and ok.ref_ms == 1.0 and ok.meets_goal
    failed = anchor_entry("t", make_result("t", "src", None, correct=False))
    assert failed.speedup is None and "incorrect" in failed.status


def test_anchors_measured_by_two_versions_of_the_evaluator_are_counted_apart() -> None:
    """A run resumed on newer evaluator code holds anchors of both; the line says which version
    measured which (H100, 2026-11-26: 18 of 23 anchors came from the code before the floor by
    call length)."""
    old = [dataclasses.replace(_anchor(0.969, 0.008, 0.006), evaluator="aaa"), _anchor(1.0, 0.006, 0.5)]
    new = [dataclasses.replace(_anchor(0.985, 0.027, 0.02), evaluator="bbb")]
    s = summarize_a_vs_a(old + new)
    assert s.by_evaluator == {"aaa": [0, 1], "?": [1, 1], "bbb": [1, 1]}
    assert "; by evaluator code: aaa 0/1, ? 1/1, bbb 1/1" in a_vs_a_line(s)
    assert AvsASummary.from_dict(s.to_dict()) == s
    one = summarize_a_vs_a(new)
    assert one.by_evaluator == {} and "by evaluator code" not in a_vs_a_line(one)
    assert anchor_entry("t", make_result("t", "src", 1.0)).evaluator is None  # made by hand


def test_every_evaluation_names_the_evaluator_code_that_made_it() -> None:
    from cudal1.eval.record import EvaluationRecord, evaluator_digest

    digest = evaluator_digest()
    assert len(digest) == 12 and int(digest, 16) >= 0
    assert EvaluationRecord().environment.evaluator == digest


def _run(a_vs_a: bool, *tasks: TaskRecord) -> RunRecord:
    ledger = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}
    config = OptimizeConfig(a_vs_a=a_vs_a)
    return RunRecord(
        Path("runs/x"), config, None, ledger, 0.0, 1.0, None, True, tasks, run_throughput([], 1.0)
    )


def _task(name: str, anchor_speedup: float | None) -> TaskRecord:
    baselines = (
        ((REFERENCE_LABEL, make_result(name, "src", anchor_speedup)),) if anchor_speedup is not None else ()
    )
    return TaskRecord(name, 1, None, None, None, DONE, 1, baselines=baselines)


def test_a_run_with_a_vs_a_states_its_anchors_and_one_without_does_not() -> None:
    summary = summarize_run(_run(True, _task("a", 1.0), _task("b", 1.08), _task("c", None)))
    assert summary.a_vs_a is not None
    assert [e.task for e in summary.a_vs_a.entries] == ["a", "b", "c"]
    assert (summary.a_vs_a.measured, summary.a_vs_a.contain_one) == (2, 1)
    console = Console(width=160, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(render_run_summary(summary, 160))
    text = console.export_text()
    assert "A-vs-A" in text and "1/2 intervals contain 1.0" in text
    md = render_run_markdown(summary)
    assert "A-vs-A (the reference as its own candidate): 1/2 intervals contain 1.0" in md
    assert "| task | ref ms | speedup [95% CI] | half-width |" in md
    assert RunSummary.from_dict(summary.to_dict()) == summary
    plain = summarize_run(_run(False, _task("a", 1.0)))
    assert plain.a_vs_a is None and "A-vs-A" not in render_run_markdown(plain)


def test_the_line_says_how_many_misses_chance_allows() -> None:
    """95% intervals of identical code leave 1.0 out of 5% of them: 29/30 is what honest
    intervals give, and the line says so (at most 4 of 30 by the binomial's 95% quantile)."""
    from cudal1.report.a_vs_a import chance_misses

    assert (
        chance_misses(30)
        == "honest 95% intervals miss 1.0 by chance: 1.5 of 30 on average, at most 4 in 95% of runs"
    )
    assert chance_misses(1).endswith("at most 0 in 95% of runs")
    assert chance_misses(18).endswith("at most 3 in 95% of runs")  # P(X <= 2) = 0.94, P(X <= 3) = 0.99
