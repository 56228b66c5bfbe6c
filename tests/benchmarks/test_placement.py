"""benchmarks/placement.py: copies of one model in one process, timed like a worker's sample. On
the CPU the script runs end to end; its table reads the copies' spread beside the processes'."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from placement import all_tasks, child, table  # noqa: E402


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
