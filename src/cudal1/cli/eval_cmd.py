"""``cudal1 eval``: one candidate against one task's reference, through the one evaluator.

Named ``eval_cmd`` so that the module does not read as, or shadow, the ``cudal1.eval`` package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cudal1.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REJECTED,
    FORMAT_HELP,
    OutputFormat,
    bad_input,
    err_console,
    load_task_set,
    print_result,
    resolve_config,
    setup_logging,
    size_for,
)
from cudal1.config import EvalConfig, Size
from cudal1.eval.pool import evaluate
from cudal1.report.terminal import render_eval_markdown, render_eval_result
from cudal1.schema import EvalResult


def exit_code(result: EvalResult) -> int:
    """0 accepted; 3 correct but rejected by a finding; 1 failed a stage or incorrect."""
    if result.ok:
        return EXIT_OK
    if result.correct and result.rejected:
        return EXIT_REJECTED
    return EXIT_FAILED


def eval_command(
    task: Annotated[str, typer.Argument(help="task file (KernelBench format) or bundled task name")],
    candidate: Annotated[Path, typer.Argument(help="candidate source defining ModelNew")],
    device: Annotated[str | None, typer.Option(help="auto | cpu | cuda | cuda:N")] = None,
    fmt: Annotated[OutputFormat, typer.Option("--format", help=FORMAT_HELP)] = "table",
    size: Annotated[Size, typer.Option(help="bundled task size (auto: by device)")] = "auto",
    config: Annotated[Path | None, typer.Option(help="YAML EvalConfig")] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="config override, e.g. timing.budget_s=5")
    ] = None,
    verbose: Annotated[bool, typer.Option("-v", "--verbose")] = False,
) -> None:
    """Compile, check and time one CANDIDATE against TASK's reference, in isolated workers."""
    setup_logging(verbose)
    cfg = resolve_config(EvalConfig, config, set_, {"device": device})
    if not candidate.is_file():
        raise bad_input(f"{candidate}: no such candidate file")
    try:
        source = candidate.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise bad_input(f"{candidate}: cannot read the candidate as UTF-8 text: {exc}") from None
    tasks = load_task_set(task, size_for(size, cfg.device))
    if len(tasks) != 1:
        raise bad_input(f"{task} holds {len(tasks)} tasks; name one file")
    with err_console.status(f"evaluating {candidate.name} against {tasks[0].name}..."):
        result = evaluate(tasks[0], source, cfg)
    print_result(
        fmt,
        lambda width: render_eval_result(result, width),
        lambda: render_eval_markdown(result),
        result.to_dict,
    )
    raise typer.Exit(exit_code(result))
