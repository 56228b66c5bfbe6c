"""Tables at 80 columns (a pipe, or COLUMNS=80) stay legible: no cell cut to an ellipsis, low
priority columns dropped in their stated order and named in the caption; Markdown keeps all."""

from __future__ import annotations

import dataclasses

from rich.console import Console, RenderableType

from cudal1.report.runs import RunSummary, TaskSummary, render_run_markdown, render_run_summary, run_table
from cudal1.report.tables import Col, TableSpec, fit_columns, to_markdown, to_rich
from cudal1.report.terminal import render_eval_result
from cudal1.report.verify import render_rows, render_summary, summarize
from cudal1.schema import (
    Correctness,
    EvalResult,
    Finding,
    Severity,
    Stage,
    StageRecord,
    Timing,
)
from cudal1.search.verify import Row


def render(renderable: RenderableType, width: int = 80) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def task(name: str, outcome: str, label: str | None, speedup: float | None) -> TaskSummary:
    return TaskSummary(
        task=name, level=3, outcome=outcome, best_id=7, best_label=label, speedup=speedup,  # type: ignore[arg-type]
        ci_low=speedup and speedup * 0.98, ci_high=speedup and speedup * 1.02, correct=True,
        ref_ms=12.3456, cand_ms=9.87654, final=True, search_speedup=speedup, evaluated=12,
        correct_count=9, parse_failed=1, pending=0, rounds_done=3,
    )  # fmt: skip


SUMMARY = RunSummary(
    run_dir="runs/a-rather-long-run-directory-name/that-goes-on",
    llm="openai:some-model-with-a-long-name", rounds=2, samples=4, device="cuda:0",
    gpu="NVIDIA H100 80GB HBM3", llm_calls=9, prompt_tokens=123456, completion_tokens=65432,
    cost_usd=1.23, gpu_seconds=321.0, wall_s=456.0, stop_reason=None, complete=True,
    tasks=(
        task("4_transformer_block", "faster", "torch-compile-reduce-overhead", 1.93),
        task("6_conv_maxpool_sigmoid_sum", "no faster variant found", "cuda-graph", 0.951),
        task("3_softmax", "faster", "llm-r2-s3", 1.412),
    ),
)  # fmt: skip


def test_run_table_at_80_columns_cuts_no_cell_and_says_what_it_dropped() -> None:
    text = render(render_run_summary(SUMMARY, 80))
    assert "…" not in text
    assert all(len(line) <= 80 for line in text.splitlines())
    for value in ("torch-compile-reduce-overhead", "6_conv_maxpool_sigmoid_sum", "1.930x", "[1.89,", "1.97]"):
        assert value in text
    words = " ".join(text.split())
    assert (
        "not shown at this width: level, best tried, not kept, ref ms, kept ms, evaluated, #correct" in words
    )
    wide = render(render_run_summary(SUMMARY, 200), 200)
    assert "not shown" not in wide and "cuda-graph 0.951x" in wide and "12.35" in wide


def test_a_cpu_run_says_it_ran_on_the_cpu() -> None:
    cpu = dataclasses.replace(SUMMARY, device="cpu", gpu=None)
    for text in (render(render_run_summary(cpu, 120), 120), render_run_markdown(cpu)):
        assert "GPU:" not in text and "cpu (no GPU; timed by wall clock)" in " ".join(text.split())
    assert "cuda:0 (NVIDIA H100 80GB HBM3)" in " ".join(render(render_run_summary(SUMMARY, 120), 120).split())


def test_columns_go_in_the_stated_order() -> None:
    cols = (Col("name"), Col("a long heading", "a", drop=1), Col("b", drop=3), Col("c", drop=2))
    spec = TableSpec("t", cols, (("x" * 20, "1", "2" * 10, "3" * 10),))
    kept, headings, _ = fit_columns(spec, 67)
    assert kept == [0, 1, 2, 3] and headings[1] == "a long heading"
    kept, headings, _ = fit_columns(spec, 45)
    assert kept == [0, 1, 3] and headings[1] == "a"  # headings shortened first, then b (drop 3) goes
    kept, _, _ = fit_columns(spec, 30)
    assert kept == [0, 1]


def test_markdown_keeps_every_column_and_escapes_pipes() -> None:
    md = render_run_markdown(SUMMARY)
    assert "| task | level | kept | speedup [95% CI] | best tried, not kept |" in md
    assert "cuda-graph 0.951x" in md and "| 6_conv_maxpool_sigmoid_sum | 3 | reference | 1.000x |" in md
    spec = TableSpec("t", (Col("a"),), (("x|y",),))
    assert "x\\|y" in to_markdown(spec)


def test_verify_tables_at_80_columns() -> None:
    rows = [
        Row(0, 1, "L1_1", "verified", 2.5, 2.31, 2.2, 2.4, 1.234, 0.534, "timing", "", ("global_state (warning)",)),
        Row(1, 2, "L2_17", "rejected", 3.1, None, stage="correctness",
            reason="input_mutated: the candidate writes into its inputs, which the reference never does",
            findings=("input_mutated (reject)", "side_stream_unjoined (reject)")),
        Row(2, 3, "L3_44", "no code", reason="the record holds no custom code"),
    ]  # fmt: skip
    text = render(render_rows(rows, 80)) + render(render_summary(summarize(rows), 80))
    assert "…" not in text and "rejected" in text and "input_mutated" in text
    assert all(len(line) <= 80 for line in text.splitlines())


def test_eval_result_at_80_columns() -> None:
    timing = Timing("cpu", 4, (1.0, 1.1), (0.5, 0.6), (1.0, 1.1), (0.5, 0.6), 1.9, 1.8, 2.0, 1.9, "precision")
    result = EvalResult(
        task="5_gelu", candidate_hash="abc", device="cpu",
        stages=tuple(StageRecord(s, True, 0.5) for s in (Stage.STATIC, Stage.COMPILE, Stage.CORRECTNESS)),
        correctness=Correctness(5, 5, 1e-6, 0.1, 1.0, "float64"), timing=timing,
        findings=(Finding("torch_namespace_patched_by_something_long", Severity.WARNING, Stage.STATIC,
                          "a long message " * 12),),
    )  # fmt: skip
    text = render(render_eval_result(result, 80))
    assert "…" not in text and "torch_namespace_patched_by_something_long" in text and "PASS" in text


def test_to_rich_names_dropped_columns_in_its_caption() -> None:
    spec = TableSpec("t", (Col("keep" * 10), Col("extra", drop=1)), (("v" * 70, "w" * 20),), caption="c")
    text = render(to_rich(spec, 80))
    assert "not shown at this width: extra" in " ".join(text.split()) and "w" * 20 not in text


def test_no_two_columns_of_the_quick_start_table_share_a_heading_at_80_columns() -> None:
    """The quick start's table at 80 columns dropped ``ref ms`` and kept ``kept ms`` under its
    short heading ``kept``, beside the ``kept`` column: two columns a reader could not tell apart."""
    quick = dataclasses.replace(
        SUMMARY,
        tasks=(
            task("3_softmax", "no faster variant found", None, None),
            task("2_conv_bn_relu", "no faster variant found", None, None),
            task("4_transformer_block", "no faster variant found", "cudnn-benchmark", 0.979),
        ),
    )
    _, headings, _ = fit_columns(run_table(quick), 80)
    assert len(headings) == len(set(headings)), headings
