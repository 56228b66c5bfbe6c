"""A run directory that cannot take the session asked for is bad input (exit 2, one line), for
every command that writes runs: nothing is evaluated and no traceback is shown."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cudal1.cli import app
from cudal1.config import CollectConfig, OptimizeConfig
from cudal1.run.directory import RunDirectory, start_session
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
