"""``cudal1 optimize`` and ``cudal1 runs show`` on CPU: a run, its summary, resume, bad input
and SIGTERM."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import typer
import yaml
from run_fixtures import GELU, OptimizeProcess, config_data
from typer.testing import CliRunner

from cudal1.cli import app
from cudal1.report.runs import RunSummary, summarize_run
from cudal1.run.records import load_run


@pytest.fixture
def cli() -> typer.Typer:
    return app


def test_cli_optimize_and_runs_show(tmp_path: Path, cli: typer.Typer) -> None:
    runner = CliRunner()
    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text(yaml.safe_dump(config_data(tmp_path)))
    run = tmp_path / "run"
    args = ["optimize", GELU.name, "--out", str(run), "--config", str(cfg_file)]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert GELU.name in result.output and "reference" in result.output
    # not a terminal: one plain line per finished evaluation and per finished task, with its time
    assert (
        f"s] {GELU.name} reference: correct " in result.output and f"s] {GELU.name} done: " in result.output
    )
    assert RunSummary.from_dict(json.loads((run / "summary.json").read_text())) == summarize_run(
        load_run(run)
    )

    shown = runner.invoke(cli, ["runs", "show", str(run)])
    assert shown.exit_code == 0 and GELU.name in shown.output and "reference" in shown.output
    md = runner.invoke(cli, ["runs", "show", str(run), "--format", "md"]).stdout
    assert "| task | level | kept | speedup [95% CI] |" in md
    data = json.loads(runner.invoke(cli, ["runs", "show", str(run), "--format", "json"]).stdout)
    assert data["complete"] and data["tasks"][0]["task"] == GELU.name and data["tasks"][0]["final"]

    again = runner.invoke(cli, args)
    assert again.exit_code == 2 and "--resume" in again.output
    resumed = runner.invoke(cli, ["optimize", "--out", str(run), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert runner.invoke(cli, ["runs", "show", str(tmp_path / "nowhere")]).exit_code == 2


def test_cli_reports_bad_input_with_exit_2(tmp_path: Path, cli: typer.Typer, closed_port_url: str) -> None:
    runner = CliRunner()
    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text(yaml.safe_dump(config_data(tmp_path)))
    base = ["optimize", GELU.name, "--config", str(cfg_file)]

    bad_spec = runner.invoke(cli, [*base, "--out", str(tmp_path / "a"), "--llm", "bogus:x"])
    assert bad_spec.exit_code == 2 and "unknown LLM backend" in bad_spec.output
    no_task = runner.invoke(cli, ["optimize", "no_such_task", "--out", str(tmp_path / "b"), "--size", "cpu"])
    assert no_task.exit_code == 2 and "no bundled task" in no_task.output
    # Several tasks given apart, as a user types them (not only comma-separated): each is read,
    # and the unknown one is named (a GPU run's `optimize 2_conv_block 1_gemm ...` stopped at
    # "unexpected extra argument" before any work, 2026-11-28).
    several = runner.invoke(cli, ["optimize", "5_gelu", "nope", "--out", str(tmp_path / "b"), "--size", "cpu"])
    assert several.exit_code == 2 and "nope: no such file" in several.output, several.output
    dead = [
        *base,
        "--out",
        str(tmp_path / "c"),
        "--llm",
        "openai:m",
        "--set",
        f"llm.options.base_url={closed_port_url}",
        "--set",
        "llm.options.max_retries=0",
    ]
    result = runner.invoke(cli, dead)
    assert result.exit_code == 2 and "unreachable" in result.output
    bad_key = runner.invoke(cli, [*base, "--out", str(tmp_path / "d"), "--set", "rounds_typo=3"])
    assert bad_key.exit_code == 2 and "rounds_typo" in bad_key.output
    assert not any((tmp_path / name).exists() for name in "abcd")


def test_sigterm_saves_the_run_and_exits_like_an_interrupt(
    optimize_process: Callable[..., OptimizeProcess],
) -> None:
    """`timeout` or a scheduler stops a run with SIGTERM: the wall time so far is kept and the
    run resumes (seen on the H200 device, where a killed run reported 0 s wall)."""
    run = optimize_process(merge_output=True)
    run.wait_until((run.run / "candidates.db").exists)
    time.sleep(2.0)
    run.proc.send_signal(signal.SIGTERM)
    output, _ = run.proc.communicate(timeout=120)
    if run.proc.returncode == 0:
        pytest.skip("the run finished before SIGTERM arrived")
    assert "--resume" in output, output
    summary = summarize_run(load_run(run.run))
    assert not summary.complete and summary.wall_s > 0
