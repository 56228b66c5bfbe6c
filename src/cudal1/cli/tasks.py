"""``cudal1 tasks list``: the tasks of files, directories, records files or bundled task names, or
of the bundled suite."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from cudal1.cli.common import FORMAT_HELP, OutputFormat, load_task_specs, print_result
from cudal1.report.tables import to_markdown, to_rich
from cudal1.report.terminal import task_table, tasks_data

tasks_app = typer.Typer(help="Inspect task suites.", no_args_is_help=True)


@tasks_app.command("list")
def tasks_list(
    specs: Annotated[
        list[str] | None,
        typer.Argument(
            help="task files, KernelBench directories, records files or bundled task names (several,"
            " or comma-separated); default: the bundled suite",
            show_default=False,
        ),
    ] = None,
    size: Annotated[Literal["gpu", "cpu"], typer.Option(help="bundled suite size")] = "gpu",
    fmt: Annotated[OutputFormat, typer.Option("--format", help=FORMAT_HELP)] = "table",
) -> None:
    """List the tasks in SPECS (or the bundled suite), with their level, origin and file (relative
    to the current directory when under it)."""
    tasks = load_task_specs(specs, size)
    spec_table = task_table(tasks, Path.cwd())
    print_result(
        fmt,
        lambda width: to_rich(spec_table, width),
        lambda: to_markdown(spec_table),
        lambda: tasks_data(tasks),
    )
