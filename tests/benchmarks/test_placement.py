"""benchmarks/placement.py: copies of one model in one process, timed like a worker's sample. On
the CPU the script runs end to end; its table reads the copies' spread beside the processes'."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from placement import all_tasks, child, launches, same_kernels, table  # noqa: E402


def test_one_process_times_every_copy_on_every_sample() -> None:
    row = child(all_tasks()["lb_mlp3"], clones=3, samples=4, device=torch.device("cpu"), seed=0)
    ms = np.asarray(row["ms"])
    assert ms.shape == (4, 3)
    assert (ms > 0).all()
    assert len(row["input_at"]) == 3 and row["behind"] == 0  # a CPU has no lead to run out


def test_table_gives_copies_spread_beside_processes_spread() -> None:
    # Process 0's copies agree; process 1's copy 0 is 10% slower and its copy 1 5% faster than it.
    ones = np.ones((50, 2))
    rows = [{"task": "t", "calls": 1, "ms": ones.tolist()},
            {"task": "t", "calls": 1, "ms": (ones * [1.10, 1.045]).tolist()}]
    console = Console(width=100, record=True)
    console.print(table(rows))
    text = console.export_text()
    assert "copies spread 5.0%" in text
    assert "procs 10.0%" in text


def kernel_event(name: str, ts: float, dur: float, grid: list[int]) -> dict:
    args = {"grid": grid, "block": [128, 1, 1], "shared memory": 0, "registers per thread": 32}
    return {"cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": args}


def test_profiled_calls_fold_into_one_calls_launches_with_median_times() -> None:
    # Three calls of two kernels each, out of order in the trace, with a host event between.
    events = [kernel_event("conv", 0, 10.0, [4, 1, 1]), kernel_event("relu", 1, 2.0, [8, 1, 1]),
              {"cat": "cpu_op", "name": "aten::conv2d", "ts": 1.5},
              kernel_event("relu", 3, 2.2, [8, 1, 1]), kernel_event("conv", 2, 12.0, [4, 1, 1]),
              kernel_event("conv", 4, 11.0, [4, 1, 1]), kernel_event("relu", 5, 2.1, [8, 1, 1])]
    out = launches(events, calls=3)
    assert [k["name"] for k in out] == ["conv", "relu"]
    assert out[0]["us"] == 11.0 and out[1]["us"] == 2.1
    assert out[0]["config"] == [[4, 1, 1], [128, 1, 1], 0, 32]
    assert launches(events[:-1], calls=3) == []  # calls that launched unequal numbers of kernels


def test_processes_that_ran_one_kernel_with_other_grids_are_told_apart() -> None:
    a = launches([kernel_event("conv", 0, 10.0, [4, 1, 1])], calls=1)
    b = launches([kernel_event("conv", 0, 10.5, [8, 1, 1])], calls=1)
    assert same_kernels([{"kernels": a}, {"kernels": b}]).startswith("kernels DIFFER at launch 0: conv")
    c = launches([kernel_event("conv", 0, 10.9, [4, 1, 1])], calls=1)
    text = same_kernels([{"kernels": a}, {"kernels": c}])
    assert text.startswith("kernels: the same 1 ")
    assert "launch 0 conv: 10.00, 10.90 (spread 0.90 us)" in text
    # With the processes' event-timed samples (ms a call, copy 0 first), what the events saw
    # beyond the kernels: 12 us against 10 us of kernel is 2.00 us of gaps.
    timed = same_kernels([{"kernels": a, "ms": [[0.012]]}, {"kernels": c, "ms": [[0.0115]]}])
    assert "(gaps), us by process: 2.00, 0.60" in timed
