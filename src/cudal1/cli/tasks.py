"""``cudal1 tasks list``: the tasks of a file, directory or records file, or of the bundled suite."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from cudal1.cli.common import console, load_task_set
from cudal1.report.terminal import render_task_table

tasks_app = typer.Typer(help="Inspect task suites.", no_args_is_help=True)


@tasks_app.command("list")
def tasks_list(
    path: Annotated[
        str | None,
        typer.Argument(help="task file, KernelBench directory or records file; default: bundled suite"),
    ] = None,
    size: Annotated[Literal["gpu", "cpu"], typer.Option(help="bundled suite size")] = "gpu",
) -> None:
    """List the tasks in PATH (or the bundled suite), with their level and origin."""
    console.print(render_task_table(load_task_set(path, size)))
