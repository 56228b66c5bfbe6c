"""Naming tasks: several bundled tasks at once (comma-separated, or several arguments to
``tasks list``), and a task list that prints whole cells with paths relative to where you are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cudal1.cli import app
from cudal1.cli.common import load_task_set, load_task_specs
from cudal1.tasks import bundled_tasks

GELU = next(t for t in bundled_tasks("cpu") if t.name == "5_gelu")


def _names(output: str) -> list[str]:
    return [row["name"] for row in json.loads(output)]


@pytest.mark.parametrize(
    "args", [["3_softmax,5_gelu"], ["3_softmax", "5_gelu"], ["3_softmax, level1/5_gelu"]]
)
def test_tasks_list_names_several_bundled_tasks(args: list[str]) -> None:
    res = CliRunner().invoke(app, ["tasks", "list", *args, "--format", "json"])
    assert res.exit_code == 0, res.output
    assert _names(res.stdout) == ["3_softmax", "5_gelu"]


def test_a_comma_list_mixes_files_and_bundled_names(tmp_path: Path) -> None:
    task = tmp_path / "my_task.py"
    task.write_text(GELU.source)
    tasks = load_task_set(f"3_softmax,{task}", "cpu")
    assert [t.name for t in tasks] == ["3_softmax", "my_task"]
    assert [t.name for t in load_task_set("5_gelu,5_gelu", "cpu")] == ["5_gelu"]


def test_specs_given_apart_are_merged_as_a_comma_list_is() -> None:
    """``optimize 3_softmax 5_gelu,3_softmax`` names the tasks of both arguments, each once; no
    argument is the suite."""
    assert [t.name for t in load_task_specs(["3_softmax", "5_gelu,3_softmax"], "cpu")] == ["3_softmax", "5_gelu"]
    assert [t.name for t in load_task_specs([], "cpu")] == [t.name for t in load_task_specs(None, "cpu")]
    assert [t.name for t in load_task_specs("5_gelu", "cpu")] == ["5_gelu"]


def test_unknown_names_in_a_list_are_named_and_exit_2() -> None:
    res = CliRunner().invoke(app, ["tasks", "list", "3_softmax,nope,5_gelu,zz"])
    assert res.exit_code == 2
    assert "nope, zz: no such file, and no bundled task of that name" in res.output


def test_two_different_tasks_of_one_name_exit_2(tmp_path: Path) -> None:
    (tmp_path / "5_gelu.py").write_text(GELU.source + "\n# another\n")
    res = CliRunner().invoke(app, ["tasks", "list", f"5_gelu,{tmp_path / '5_gelu.py'}", "--size", "cpu"])
    assert res.exit_code == 2 and "two different tasks are named '5_gelu'" in res.output


def test_eval_names_one_task_of_a_list() -> None:
    res = CliRunner().invoke(app, ["eval", "3_softmax,5_gelu", __file__, "--device", "cpu"])
    assert res.exit_code == 2 and "holds 2 tasks" in res.output


def test_tasks_list_shows_paths_relative_to_here_and_cuts_no_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 80 columns the table cut names and absolute paths to an ellipsis."""
    name = "a_task_with_a_longer_name"
    level = tmp_path / "suite" / "level2"
    level.mkdir(parents=True)
    (level / f"{name}.py").write_text(GELU.source)
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["tasks", "list", str(tmp_path / "suite")])
    assert res.exit_code == 0, res.output
    assert "…" not in res.stdout and f" {name} " in res.stdout
    assert f" suite/level2/{name}.py " in res.stdout and str(tmp_path) not in res.stdout
    md = CliRunner().invoke(app, ["tasks", "list", "suite", "--format", "md"])
    assert f"| 2 | {name} | kernelbench | suite/level2/{name}.py |" in md.stdout
