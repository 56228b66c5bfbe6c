"""``cudal1 runs show``: summarise a run directory (finished, running or killed)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cudal1.cli.common import FORMAT_HELP, OutputFormat, bad_input, print_result
from cudal1.report.runs import render_run_markdown, render_run_summary, summarize_run
from cudal1.run.directory import RunError
from cudal1.run.records import load_run

runs_app = typer.Typer(help="Inspect optimisation runs.", no_args_is_help=True)


@runs_app.command("show")
def runs_show(
    run: Annotated[Path, typer.Argument(help="run directory")],
    fmt: Annotated[OutputFormat, typer.Option("--format", help=FORMAT_HELP)] = "table",
) -> None:
    """Summarise a run (finished, running or killed): per-task best speedup and the run's spend."""
    if not run.is_dir():
        raise bad_input(f"{run}: no such run directory")
    try:
        summary = summarize_run(load_run(run))
    except RunError as exc:
        raise bad_input(str(exc)) from None
    print_result(
        fmt,
        lambda width: render_run_summary(summary, width),
        lambda: render_run_markdown(summary),
        summary.to_dict,
    )
