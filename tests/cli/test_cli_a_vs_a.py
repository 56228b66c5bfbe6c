"""``cudal1 optimize --a-vs-a`` on CPU: a run of the bundled GELU task whose summary states how
the reference, measured as its own candidate, came out (issue 22, item 3)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from run_fixtures import GELU, config_data
from typer.testing import CliRunner

from cudal1.cli import app
from cudal1.report.runs import RunSummary


def test_optimize_with_a_vs_a_states_the_anchor_in_its_summary(tmp_path: Path) -> None:
    runner = CliRunner()
    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text(yaml.safe_dump(config_data(tmp_path)))
    run = tmp_path / "run"
    args = ["optimize", GELU.name, "--out", str(run), "--config", str(cfg_file), "--a-vs-a"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "A-vs-A" in result.output and "intervals contain 1.0" in result.output
    summary = RunSummary.from_dict(json.loads((run / "summary.json").read_text()))
    assert summary.a_vs_a is not None
    (entry,) = summary.a_vs_a.entries
    assert entry.task == GELU.name and entry.speedup is not None and entry.clock is not None
    assert summary.a_vs_a.measured == 1 and summary.a_vs_a.clocks == {entry.clock: 1}
    assert yaml.safe_load((run / "config.yaml").read_text())["a_vs_a"] is True
    shown = json.loads(runner.invoke(app, ["runs", "show", str(run), "--format", "json"]).stdout)
    assert shown["a_vs_a"]["entries"][0]["task"] == GELU.name
    md = runner.invoke(app, ["runs", "show", str(run), "--format", "md"]).stdout
    assert "A-vs-A (the reference as its own candidate): " in md


def test_the_a_vs_a_flag_has_help_text() -> None:
    result = CliRunner().invoke(app, ["optimize", "--help"], env={"COLUMNS": "200"})
    assert "--a-vs-a" in result.output and "reference, measured as its own candidate" in result.output
