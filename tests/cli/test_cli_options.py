"""Finite choices on the command line are checked before any work: a typo exits 2."""

from __future__ import annotations

from pathlib import Path

import pytest
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


@pytest.mark.parametrize("gpus", [0, 2])
@pytest.mark.parametrize(
    "command",
    [
        ["eval", "5_gelu", "CANDIDATE", "--device", "cuda:7"],
        ["optimize", "5_gelu", "--out", "RUN", "--device", "cuda:7"],
        ["optimize", "5_gelu", "--out", "RUN", "--set", "pool.devices=[cuda:7]"],
        ["collect", "5_gelu", "--out", "RUN", "--llm", "scripted:x", "--device", "cuda:7"],
        ["verify", "RECORDS", "--device", "cuda:7"],
        ["train", "selfsup", "--model", "m", "--out", "RUN", "--device", "cuda:7"],
        ["train", "grpo", "--model", "m", "--out", "RUN", "--device", "cuda:7"],
    ],
)
def test_a_device_this_machine_lacks_exits_2_before_any_work(
    command: list[str], gpus: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--device cuda:7 on a machine without it: eval exited 1 (a failed candidate) and optimize
    exited 0 with every variant failed; now every command refuses it up front."""
    monkeypatch.setattr("cudal1.cli.common.visible_gpus", lambda: gpus)
    candidate, records = tmp_path / "c.py", tmp_path / "r.jsonl"
    candidate.write_text("class ModelNew: pass\n")
    records.write_text("{}\n")
    paths = {"CANDIDATE": str(candidate), "RUN": str(tmp_path / "run"), "RECORDS": str(records)}
    res = CliRunner().invoke(app, [paths.get(arg, arg) for arg in command])
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "cuda:7" in lines[0], res.output
    assert not (tmp_path / "run").exists()


def test_a_bad_set_key_is_one_line_naming_the_valid_keys(tmp_path: Path) -> None:
    candidate = tmp_path / "c.py"
    candidate.write_text("class ModelNew: pass\n")
    args = ["eval", "5_gelu", str(candidate), "--set", "timing.budget=3", "--set", "seed=x"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert all(line.startswith("error: config: ") for line in lines) and len(lines) == 2, res.output
    assert "timing.budget: unknown key (did you mean budget_s?); valid keys here: " in res.output
    assert "seed: Input should be a valid integer" in res.output
    assert "pydantic" not in res.output and "http" not in res.output
