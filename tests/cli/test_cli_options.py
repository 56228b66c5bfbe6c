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


def test_help_prose_is_reflowed_but_lists_keep_their_lines() -> None:
    from cudal1.cli.common import _reflow

    text = (
        "One sentence broken\nacross lines; --flags\n--stay in it.\n\nItems:\n- first\n- second\n  indented"
    )
    assert _reflow(text) == (
        "One sentence broken across lines; --flags --stay in it.\n\nItems:\n- first\n- second\n  indented"
    )


def test_version_prints_the_installed_version() -> None:
    from importlib.metadata import version

    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.stdout == f"cudal1 {version('cudal1')}\n"
