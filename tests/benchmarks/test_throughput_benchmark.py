"""The throughput benchmark runs on CPU, small: two bundled tasks' baselines on a pool of two, and
reports evaluations per device-hour, the seconds by part and the workers sampled over time."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from throughput import main  # noqa: E402

pytestmark = pytest.mark.slow


def test_the_benchmark_runs_on_cpu_and_reports_throughput(tmp_path: Path, capsys) -> None:
    overrides = [
        "eval.timing.budget_s=0.5",
        "eval.timing.min_samples=5",
        "eval.timing.max_samples=8",
        "eval.correctness_trials=2",
        "eval.sandbox.call_timeout_s=60",
        f"eval.build_cache={tmp_path / 'builds'}",
        "baseline_labels=[channels-last]",
    ]
    argv = ["--size", "cpu", "--limit", "2", "--device", "cpu", "--workers", "2", "--suite", "quick"]
    argv += [a for o in overrides for a in ("--set", o)]
    argv += ["--sample-s", "0.05", "--run-dir", str(tmp_path / "run"), "--json", str(tmp_path / "out.json")]
    outcome = main(argv)
    data = json.loads((tmp_path / "out.json").read_text())
    # Two tasks, each with the reference anchor; the conv task also with channels_last (the CUDA-only
    # baselines are not proposed on a CPU).
    assert data["evaluations"] == outcome.throughput.evaluations == 3
    assert data["devices"] == 1 and data["workers"] == 2
    assert data["per_device_hour"] > 0 and 0 < data["held_share"] <= 1
    assert set(data["seconds_by_part"]) == {"build", "first calls", "correctness", "timing"}
    assert data["seconds_by_part"]["timing"] > 0
    assert outcome.samples and 0 <= data["busy_share"] <= 1
    assert len(data["timeline"]) == 10
    printed = capsys.readouterr().out
    assert "per device-hour" in printed and "workers over time" in printed
