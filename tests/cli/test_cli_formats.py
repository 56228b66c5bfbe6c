"""--format table|md|json on a command that prints one result (eval), and a bad format exits 2."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from cudal1.cli import app

FAST = ["--device", "cpu", "--set", "timing.budget_s=0.3", "--set", "timing.min_samples=3",
        "--set", "correctness_trials=2", "--set", "timing.bootstrap_resamples=100"]  # fmt: skip
CANDIDATE = """import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def forward(self, x):
        return F.gelu(x)
"""


def test_eval_in_every_format(tmp_path: Path) -> None:
    cand = tmp_path / "cand.py"
    cand.write_text(CANDIDATE)
    base = ["eval", "5_gelu", str(cand), *FAST, "--set", f"build_cache={tmp_path / 'builds'}"]
    runner = CliRunner()
    md = runner.invoke(app, [*base, "--format", "md"])
    assert md.exit_code == 0, md.output
    assert "| stage | ok | seconds |" in md.stdout and "PASS" in md.stdout
    data = json.loads(runner.invoke(app, [*base, "--format", "json"]).stdout)
    assert data["ok"] is True and data["task"] == "5_gelu"
    table = runner.invoke(app, [*base])
    assert table.exit_code == 0 and "speedup" in table.stdout and "…" not in table.stdout
    assert runner.invoke(app, [*base, "--format", "html"]).exit_code == 2
