"""The timing measures the models the re-drawn-weights probe passed the candidate on: a speed that
holds only at the initial weights is never measured (``audit/cases/gate_checked_at_runtime.py``).
Where that probe is off, skipped or has nothing to re-draw, the default-weight models are timed,
and the result says which (``environment.timed_weights``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudal1.audit import cases_dir
from cudal1.config import GuardConfig
from cudal1.eval.pool import evaluate
from cudal1.schema import Severity, Task

GATED = Task("gated_residual", (cases_dir() / "tasks" / "gated_residual.py").read_text())

# Exact for any weights; every call appends its gate's size to LOG: 0.0 at the default weights
# (the ReZero gate starts at zero), more once the weights are re-drawn.
GATE_LOGGER = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.branch = nn.Linear(features, features)
        self.gate = nn.Parameter(torch.zeros(features))

    def forward(self, x):
        with open(LOG, "a") as f:
            f.write(repr(float(self.gate.abs().sum())) + "\\n")
        return x + self.gate * F.gelu(self.branch(x))
"""

# A reference whose output is NaN once its zero offset is re-drawn (half of it turns negative).
SQRT_OFFSET = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.offset = nn.Parameter(torch.zeros(features))

    def forward(self, x):
        return x + torch.sqrt(self.offset)


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return [16]
"""


@pytest.fixture
def cfg(fast_config):
    """The late probes off: their models are built apart from the timed ones."""
    return fast_config.model_copy(
        update={"guards": GuardConfig(alternative_shapes="off", init_inputs=False), "first_calls": 0}
    )


def _gates(log: Path) -> list[float]:
    return [float(v) for v in log.read_text().split()]


def test_the_timed_calls_run_on_the_redrawn_weights(cfg, tmp_path):
    log = tmp_path / "calls.log"
    result = evaluate(GATED, GATE_LOGGER.replace("LOG", repr(str(log))), cfg)
    assert result.ok, result.error
    assert result.environment.timed_weights == "redrawn"
    gates = _gates(log)
    # The checked sets at the defaults, then the probe's call and every timed call re-drawn.
    redrawn = gates[next(i for i, g in enumerate(gates) if g > 0) :]
    assert gates[0] == 0.0 and len(redrawn) > 1 + cfg.timing.min_samples
    assert all(g > 0 for g in redrawn), "a call after the probe ran at the default weights"
    # A recorded evaluation is reproducible from its record: its seed re-draws the same weights.
    again = tmp_path / "again.log"
    seeded = cfg.model_copy(update={"seed": result.environment.seed})
    assert evaluate(GATED, GATE_LOGGER.replace("LOG", repr(str(again))), seeded).ok
    assert {g for g in _gates(again) if g > 0} == set(redrawn)


def test_with_the_guard_off_the_default_weights_are_timed(cfg, tmp_path):
    log = tmp_path / "calls.log"
    off = cfg.model_copy(update={"guards": cfg.guards.model_copy(update={"default_weights": False})})
    result = evaluate(GATED, GATE_LOGGER.replace("LOG", repr(str(log))), off)
    assert result.ok, result.error
    assert result.environment.timed_weights == "default"
    assert set(_gates(log)) == {0.0}


def test_a_reference_not_finite_on_redrawn_weights_is_timed_at_the_defaults(cfg):
    honest = SQRT_OFFSET.split("\n\ndef get_inputs")[0].replace("class Model(", "class ModelNew(")
    result = evaluate(Task("sqrt_offset", SQRT_OFFSET), honest, cfg)
    assert result.ok, result.error
    assert result.environment.timed_weights == "default"
    skipped = next(f for f in result.findings if f.code == "probe_skipped")
    assert skipped.severity is Severity.INFO and "timed at the default weights" in skipped.message
    assert "timed at the default weights" in result.environment.probes["default_weights"]["skipped"]


def test_the_timed_window_says_when_and_which_processes_were_timed(cfg, tmp_path):
    """Wall-clock start and end of the paired samples and the pair's pids: what a per-second log
    of the GPUs is joined on (benchmarks/gpu_sharing.py)."""
    import os
    import time

    before = time.time()
    result = evaluate(GATED, GATE_LOGGER.replace("LOG", repr(str(tmp_path / "calls.log"))), cfg)
    after = time.time()
    assert result.ok, result.error
    window = result.environment.timed_window
    assert before < window["start"] <= window["end"] < after
    ref_pid, cand_pid = window["pids"]
    assert ref_pid != cand_pid and os.getpid() not in (ref_pid, cand_pid)
    assert window["gpu_uuid"] is None  # on the CPU
    again = type(result).from_dict(result.to_dict()).environment.timed_window
    assert again == window
