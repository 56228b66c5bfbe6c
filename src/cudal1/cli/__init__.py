"""The command line: each command turns its options into a config, makes one library call, and
maps the outcome to an exit code (codes, consoles and errors: ``cli.common``).

One module per command: ``tasks`` (``tasks list``), ``eval_cmd`` (``eval``), ``verify``,
``optimize``, ``runs`` (``runs show``), ``export``, ``report``, ``collect``, ``dataset``
(``dataset export``), ``train`` (``train sft|selfsup|grpo``), ``audit`` (a GRPO run's held
rewards) and ``capacity`` (a node's GPUs split for GRPO); long commands show progress through
``cli.progress``.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer

from cudal1.cli.audit import audit_command
from cudal1.cli.capacity import capacity_command
from cudal1.cli.collect import collect_command
from cudal1.cli.common import EXIT_OK, console, reflow_help
from cudal1.cli.dataset import dataset_app
from cudal1.cli.eval_cmd import eval_command
from cudal1.cli.export import export_command
from cudal1.cli.optimize import optimize_command
from cudal1.cli.report import report_command
from cudal1.cli.runs import runs_app
from cudal1.cli.tasks import tasks_app
from cudal1.cli.train import train_app
from cudal1.cli.verify import verify_command

app = typer.Typer(
    help="cudal1: verified-faster PyTorch modules with LLM-written CUDA (an open CUDA-L1).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(asked: bool) -> None:
    if asked:
        try:
            number = version("cudal1")
        except PackageNotFoundError:  # a source tree on PYTHONPATH that was never installed
            number = "unknown (not installed)"
        console.print(f"cudal1 {number}", highlight=False)
        raise typer.Exit(EXIT_OK)


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="print cudal1's version and exit"
        ),
    ] = False,
) -> None:
    """cudal1: verified-faster PyTorch modules with LLM-written CUDA (an open CUDA-L1)."""


app.add_typer(tasks_app, name="tasks")
app.command("eval")(eval_command)
app.command("verify")(verify_command)
app.command("optimize")(optimize_command)
app.add_typer(runs_app, name="runs")
app.command("export")(export_command)
app.command("collect")(collect_command)
app.add_typer(dataset_app, name="dataset")
app.add_typer(train_app, name="train")
app.command("report")(report_command)
app.command("audit")(audit_command)
app.command("capacity")(capacity_command)
reflow_help(app)


def main() -> None:
    app()
