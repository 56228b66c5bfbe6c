"""Finite choices on the command line are checked before any work: a typo exits 2."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from cudal1.cli import app


def test_size_typo_exits_2() -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["tasks", "list", "--size", "cpu"]).exit_code == 0
    bad = runner.invoke(app, ["tasks", "list", "--size", "huge"])
    assert bad.exit_code == 2 and "huge" in bad.output


def test_device_typo_exits_2(tmp_path: Path) -> None:
    candidate = tmp_path / "c.py"
    candidate.write_text("class ModelNew: pass\n")
    res = CliRunner().invoke(app, ["eval", "5_gelu", str(candidate), "--device", "gpu0"])
    assert res.exit_code == 2 and "device" in res.output
