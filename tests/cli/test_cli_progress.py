"""Progress in any terminal or log: plain flushed lines when stderr is not a terminal, bars when it
is; the optimize command prints a line per finished evaluation and per finished task."""

from __future__ import annotations

import io

from rich.console import Console

from cudal1.cli.progress import ProgressReporter, TrainingView
from cudal1.report.progress import evaluation_line, step_line, task_line
from cudal1.run.events import Evaluated, RoundJudged, TaskFinal, TrainStep


def reporter(terminal: bool) -> tuple[ProgressReporter, io.StringIO]:
    out = io.StringIO()
    return ProgressReporter(Console(file=out, force_terminal=terminal, width=100)), out


def test_plain_mode_prints_one_line_per_finished_unit() -> None:
    progress, out = reporter(terminal=False)
    assert not progress.live
    with progress:
        bar = progress.bar("5_gelu", total=2)
        progress.advance(bar, "5_gelu cuda-graph: correct 1.020x [1.001, 1.040]")
        progress.update(bar, status="best 1.020x")  # bars only: nothing printed
        progress.advance(bar, "5_gelu reference: correct 0.998x [0.990, 1.006]")
        progress.note("5_gelu done: no faster variant found; keeping the reference")
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and all(line.startswith("[") and "s] 5_gelu" in line for line in lines)
    assert "best 1.020x" not in out.getvalue()


def test_terminal_mode_draws_bars_and_keeps_notes() -> None:
    progress, out = reporter(terminal=True)
    assert progress.live
    with progress:
        bar = progress.bar("5_gelu", total=2)
        progress.advance(bar, "5_gelu cuda-graph: correct 1.020x")
        progress.note("5_gelu done: faster: cuda-graph 1.020x")
    text = out.getvalue()
    assert "5_gelu done: faster" in text and "1/2" in text


def evaluated(label: str, *, ok: bool, speedup: float | None, ci=(None, None), error=None) -> Evaluated:  # type: ignore[no-untyped-def]
    return Evaluated("3_softmax", 1, label, 0, ok, speedup, ci[0], ci[1], error, None, None, 1)


def test_line_wording() -> None:
    ok = evaluation_line(evaluated("cuda-graph", ok=True, speedup=1.02, ci=(1.001, 1.04)))
    assert ok == "3_softmax cuda-graph: correct 1.020x [1.001, 1.040]"
    bad = evaluation_line(evaluated("llm-r1-s0", ok=False, speedup=None, error="correctness stage: NaN"))
    assert bad == "3_softmax llm-r1-s0: not ok: correctness stage: NaN"
    slower = task_line(TaskFinal("3_softmax", "cuda-graph", True, 0.95, 0.93, 0.97, faster=False))
    assert (
        "no faster variant found (best tried: cuda-graph 0.950x [0.930, 0.970]); keeping the reference"
        in slower
    )
    assert task_line(TaskFinal("a", "x", True, 1.5, None, None, faster=True)) == "a done: faster: x 1.500x"


def test_training_view_prints_a_line_per_logged_step() -> None:
    progress, out = reporter(terminal=False)
    with progress:
        view = TrainingView(progress)
        view(TrainStep("grpo", 1, 3, {"loss": 0.01, "reward": -0.1}))
        view(RoundJudged(round=1, samples=8, kept=5))
        view(TrainStep("grpo", 2, 3, {"loss": 0.02}))
    lines = out.getvalue().splitlines()
    assert [line.partition("s] ")[2] for line in lines] == [
        "grpo step 1/3: loss 0.01, reward -0.1",
        "round 1: 5 of 8 samples executable and correct",
        "grpo step 2/3: loss 0.02",
    ]
    terminal, text = reporter(terminal=True)
    with terminal:
        TrainingView(terminal)(TrainStep("sft", 2, 4))
    assert "2/4" in text.getvalue()
    assert step_line(TrainStep("sft", 1, 2, {"loss": 1.23456, "mean_token_accuracy": 0.5})) == (
        "sft step 1/2: loss 1.23, token accuracy 0.5"
    )
