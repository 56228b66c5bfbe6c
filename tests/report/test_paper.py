"""The paper's statistics and the baseline comparison, on hand-made entries."""

from __future__ import annotations

import dataclasses

import pytest

from cudal1.report.paper import (
    Cost,
    Entry,
    Source,
    baseline_table,
    percentile,
    report_tables,
    speedup_stats,
    task_table,
)
from cudal1.report.tables import fit_columns, to_markdown


def test_statistics_as_the_paper_reports_them() -> None:
    s = speedup_stats([1.0, 1.005, 2.0, 4.0, None])
    assert (s.tasks, s.correct, s.faster) == (5, 4, 2)  # None: no correct kernel; 1.005 is not > 1.01
    assert s.mean == pytest.approx((1.0 + 1.005 + 2.0 + 4.0) / 4) and s.max == 4.0
    assert s.p50 == pytest.approx(1.5025) and s.p25 == pytest.approx(1.00375) and s.p75 == pytest.approx(2.5)
    assert s.geomean == pytest.approx((1.0 * 1.005 * 2.0 * 4.0) ** 0.25)
    assert percentile([3.0, 1.0, 2.0], 100) == 3.0 and percentile([5.0], 25) == 5.0
    empty = speedup_stats([None, None])
    assert (empty.tasks, empty.correct, empty.mean) == (2, 0, None)


def entry(task: str, label: str, speedup: float, **baselines: float) -> Entry:
    return Entry("run", "H100", task, 1, label, True, speedup, baselines=dict(baselines))


ENTRIES = [
    # kept torch.compile itself: 1.0x over torch.compile, whatever the search measured for it
    entry("a", "torch-compile-default", 1.5, **{"torch-compile-default": 1.4, "cuda-graph": 0.5}),
    entry("b", "llm-r1-s0", 3.0, **{"torch-compile-default": 1.5, "cuda-graph": 2.0}),
    entry("c", "reference", 1.0, **{"cuda-graph": 0.8}),  # torch.compile failed here: not compared
]


def test_speedup_over_each_baseline() -> None:
    assert ENTRIES[0].over("torch-compile-default") == 1.0 and ENTRIES[1].over("torch-compile-default") == 2.0
    assert ENTRIES[2].over("torch-compile-default") is None and ENTRIES[2].over("cuda-graph") == 1.25
    rows = {r[0]: r for r in baseline_table(ENTRIES, "H100").plain_rows()}
    assert rows["compile"][1:4] == ["2", "2", "1"]  # two tasks compared, one faster than torch.compile
    assert rows["compile"][4] == "1.500"  # mean of 1.0 and 2.0
    assert rows["graph"][1] == "3" and rows["eager"][4] == f"{(1.5 + 3.0 + 1.0) / 3:.3f}"


def test_over_the_best_baseline_is_over_the_faster_of_eager_and_torch_compile() -> None:
    assert ENTRIES[0].over_best() == 1.0  # kept the fastest torch.compile itself
    assert ENTRIES[1].over_best() == 2.0  # 3.0x eager over torch.compile's 1.5x; a CUDA graph is no bar
    assert ENTRIES[2].over_best() is None  # torch.compile did not verify here: no bar measured
    assert (
        entry("d", "llm-r1-s0", 1.2, **{"torch-compile-default": 0.8}).over_best() == 1.2
    )  # eager is faster
    rows = {r[0]: r for r in baseline_table(ENTRIES, "H100").plain_rows()}
    assert rows["best"][1:5] == ["2", "2", "1", "1.500"]  # two tasks with a bar; mean of 1.0 and 2.0


def test_task_table_keeps_over_best_baseline_then_over_torch_compile_longest() -> None:
    spec = task_table(ENTRIES)
    _, headings, _ = fit_columns(spec, 60)  # room for one baseline column
    assert "/best" in headings and "/compile" not in headings and "SOL%" not in headings
    _, headings, _ = fit_columns(spec, 70)  # room for two
    assert "/best" in headings and "/compile" in headings and "/graph" not in headings
    assert [r[4] for r in spec.plain_rows()] == ["1.000x", "2.000x", "-"]


def test_a_cpu_run_is_not_compared_with_what_only_a_gpu_measures() -> None:
    """On a CPU, a CUDA graph or cuDNN flags ran the reference unchanged (runs from before they
    were skipped there hold them): no "over CUDA graph" for what was the reference renamed."""
    cpu = [
        Entry(
            "run", "cpu", "a", 1, "llm-r1-s0", True, 1.5, baselines={"cuda-graph": 1.0, "channels-last": 1.2}
        ),
        Entry("run", "cpu", "b", 1, "reference", True, 1.0, baselines={"cudnn-benchmark": 1.0}),
    ]
    text = " ".join(to_markdown(t) for t in report_tables([Source(tuple(cpu), Cost("run", "run", "cpu"))]))
    assert "CUDA graph" not in text and "cuDNN" not in text and "/graph" not in text
    assert "over channels_last" in text
    assert cpu[0].over("cuda-graph") is None and cpu[0].over("channels-last") == pytest.approx(1.25)
    gpu = dataclasses.replace(cpu[0], gpu="NVIDIA H100")
    assert gpu.over("cuda-graph") == 1.5  # on a GPU it is the baseline its name says
