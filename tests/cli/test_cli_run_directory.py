"""A run directory that cannot take the session asked for is bad input (exit 2, one line), for
every command that writes runs: nothing is evaluated and no traceback is shown."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cudal1.cli import app
from cudal1.config import CollectConfig, OptimizeConfig
from cudal1.run.directory import RunDirectory, RunError, start_session
from cudal1.schema import Task
from cudal1.tasks import bundled_tasks

GELU = next(t for t in bundled_tasks("cpu") if t.name == "5_gelu")


@pytest.mark.parametrize(
    ("command", "config"),
    [(["optimize"], OptimizeConfig()), (["collect", "--llm", "scripted:echo"], CollectConfig())],
)
def test_resuming_with_a_changed_task_exits_2(tmp_path: Path, command: list[str], config) -> None:  # type: ignore[no-untyped-def]
    run = RunDirectory(tmp_path / "run")
    changed = Task(name=GELU.name, source=GELU.source + "\n# changed\n", level=GELU.level)
    with run.session() as db:
        start_session(db, run, [changed], config, note="")
    res = CliRunner().invoke(app, [*command, GELU.name, "--out", str(run.path), "--resume"])
    assert res.exit_code == 2, res.output
    assert "differs from the one this run started with" in res.output
    assert "Traceback" not in res.output
    with run.open_db() as db:
        assert db.counts(GELU.name).total == 0  # nothing was stored or evaluated


def _one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), output
    return lines[0]


@pytest.mark.parametrize("command", [["optimize"], ["collect", "--llm", "scripted:echo"]])
def test_an_out_that_cannot_be_created_exits_2(tmp_path: Path, command: list[str]) -> None:
    """--out under a regular file: an OSError traceback from the run log before; one line now."""
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "run"
    res = CliRunner().invoke(app, [*command, GELU.name, "--out", str(out), "--device", "cpu"])
    assert res.exit_code == 2, res.output
    assert f"{out}: cannot write run.log" in _one_error_line(res.output)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_out_exits_2(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir(mode=0o555)
    res = CliRunner().invoke(app, ["optimize", GELU.name, "--out", str(out), "--device", "cpu"])
    assert res.exit_code == 2 and "cannot write run.log" in _one_error_line(res.output)


def test_a_database_that_cannot_be_opened_is_a_run_error(tmp_path: Path) -> None:
    """The log opens but the database does not (here: a directory where the file should be)."""
    run = RunDirectory(tmp_path / "run")
    run.db_file.mkdir(parents=True)
    with pytest.raises(RunError, match="cannot open candidates.db"), run.session():
        pass


def test_a_config_that_cannot_be_written_is_a_run_error(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path / "run")
    run.config_file.mkdir(parents=True)
    with pytest.raises(RunError, match="cannot write config.yaml"):
        run.write_config(OptimizeConfig())


def test_a_non_utf8_candidate_exits_2(tmp_path: Path) -> None:
    """A candidate file that is not UTF-8 text: a UnicodeDecodeError traceback before."""
    candidate = tmp_path / "c.py"
    candidate.write_bytes(b"class ModelNew:\n    pass\n# \xff\xfe\n")
    res = CliRunner().invoke(app, ["eval", GELU.name, str(candidate), "--device", "cpu"])
    assert res.exit_code == 2 and "UTF-8" in _one_error_line(res.output)


@pytest.mark.parametrize(
    ("command", "config"),
    [(["optimize"], OptimizeConfig()), (["collect", "--llm", "scripted:echo"], CollectConfig())],
)
def test_resuming_with_tasks_the_run_did_not_start_with_exits_2(
    tmp_path: Path, command: list[str], config: OptimizeConfig | CollectConfig
) -> None:
    """They were merged into the old run without a word; now --add-tasks must say so."""
    run = RunDirectory(tmp_path / "run")
    with run.session() as db:
        start_session(db, run, [GELU], config, note="")
    args = [*command, "5_gelu,3_softmax", "--out", str(run.path), "--resume", "--device", "cpu"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    line = _one_error_line(res.output)
    assert f"3_softmax is not among the tasks {run.path} started with (5_gelu)" in line
    assert "--add-tasks" in line and "another --out" in line
    with run.open_db() as db:
        assert db.counts("3_softmax").total == 0 and db.counts(GELU.name).total == 0


def test_a_resumed_run_keeps_its_tasks_and_adds_only_when_asked(tmp_path: Path) -> None:
    from cudal1.cli.common import session_tasks

    run = RunDirectory(tmp_path / "run")
    with run.session() as db:
        start_session(db, run, [GELU], OptimizeConfig(), note="")
    kept = session_tasks(None, run.path, resume=True, add=False, size="cpu")
    assert [t.name for t in kept] == ["5_gelu"]
    assert [t.name for t in session_tasks("5_gelu", run.path, resume=True, add=False, size="cpu")] == [
        "5_gelu"
    ]
    added = session_tasks("5_gelu,3_softmax", run.path, resume=True, add=True, size="cpu")
    assert [t.name for t in added] == ["5_gelu", "3_softmax"]
    apart = session_tasks(["5_gelu", "3_softmax"], run.path, resume=True, add=True, size="cpu")
    assert [t.name for t in apart] == ["5_gelu", "3_softmax"]
    assert session_tasks([], run.path, resume=True, add=False, size="cpu") == kept  # none named: as started


def test_add_tasks_without_resume_exits_2(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["optimize", "5_gelu", "--out", str(tmp_path / "r"), "--add-tasks"])
    assert res.exit_code == 2 and "pass --resume as well" in _one_error_line(res.output)
