"""The command line: each command turns its options into a config, makes one library call, and
maps the outcome to an exit code.

Exit codes: 0 success; 1 the candidate failed a stage or is incorrect; 2 bad input (a missing or
broken task or candidate file, a bad option); 3 correct but rejected by an integrity finding.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console

from cudal1.config import EvalConfig, load_config
from cudal1.report.terminal import render_eval_result, render_task_table
from cudal1.schema import EvalResult, Task

app = typer.Typer(
    help="cudal1: verified-faster PyTorch modules with LLM-written CUDA (an open CUDA-L1).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
tasks_app = typer.Typer(help="Inspect task suites.", no_args_is_help=True)
app.add_typer(tasks_app, name="tasks")

console = Console()
err_console = Console(stderr=True)

Size = Literal["auto", "gpu", "cpu"]

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_REJECTED = 0, 1, 2, 3


def _bad_input(message: str) -> typer.Exit:
    err_console.print(f"[red]error:[/red] {message}")
    return typer.Exit(EXIT_BAD_INPUT)


def _size_for(size: Size, device: str) -> Literal["gpu", "cpu"]:
    if size != "auto":
        return size
    from cudal1.eval.evaluator import resolve_device

    return "cpu" if resolve_device(device) == "cpu" else "gpu"


def load_task_set(spec: str | None, size: Literal["gpu", "cpu"]) -> list[Task]:
    """A path (task file, KernelBench directory, CUDA-L1 records) or, with no path, the bundled suite."""
    from cudal1.tasks import TaskError, bundled_tasks, load_tasks

    if spec is None or spec == "bundled":
        return bundled_tasks(size)
    path = Path(spec)
    if path.exists():
        try:
            return load_tasks(path)
        except TaskError as exc:
            raise _bad_input(str(exc)) from None
    named = [t for t in bundled_tasks(size) if spec in (t.name, f"level{t.level}/{t.name}")]
    if len(named) == 1:
        return named
    raise _bad_input(f"{spec}: no such file, and no bundled task of that name (see `cudal1 tasks list`)")


def _eval_config(config: Path | None, overrides: list[str], device: str | None) -> EvalConfig:
    try:
        cfg: EvalConfig = load_config(EvalConfig, config, overrides)
    except (ValueError, OSError) as exc:
        raise _bad_input(f"config: {exc}") from None
    return cfg.model_copy(update={"device": device}) if device else cfg


def _exit_code(result: EvalResult) -> int:
    if result.ok:
        return EXIT_OK
    if result.correct and result.rejected:
        return EXIT_REJECTED
    return EXIT_FAILED


@tasks_app.command("list")
def tasks_list(
    path: Annotated[str | None, typer.Argument(help="task file, KernelBench directory or records file; default: bundled suite")] = None,
    size: Annotated[str, typer.Option(help="bundled suite size: gpu or cpu")] = "gpu",
) -> None:
    """List the tasks in PATH (or the bundled suite), with their level and origin."""
    if size not in ("gpu", "cpu"):
        raise _bad_input("--size must be gpu or cpu")
    tasks = load_task_set(path, size)  # type: ignore[arg-type]
    console.print(render_task_table(tasks))


@app.command("eval")
def eval_command(
    task: Annotated[str, typer.Argument(help="task file (KernelBench format) or bundled task name")],
    candidate: Annotated[Path, typer.Argument(help="candidate source defining ModelNew")],
    device: Annotated[str | None, typer.Option(help="auto | cpu | cuda | cuda:N")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the full result as JSON")] = False,
    size: Annotated[str, typer.Option(help="bundled task size: auto (by device), gpu or cpu")] = "auto",
    config: Annotated[Path | None, typer.Option(help="YAML EvalConfig")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="config override, e.g. timing.budget_s=5")] = None,
    verbose: Annotated[bool, typer.Option("-v", "--verbose")] = False,
) -> None:
    """Compile, check and time one CANDIDATE against TASK's reference, in isolated workers."""
    _logging(verbose)
    cfg = _eval_config(config, set_ or [], device)
    if not candidate.is_file():
        raise _bad_input(f"{candidate}: no such candidate file")
    if size not in ("auto", "gpu", "cpu"):
        raise _bad_input("--size must be auto, gpu or cpu")
    tasks = load_task_set(task, _size_for(size, cfg.device))  # type: ignore[arg-type]
    if len(tasks) != 1:
        raise _bad_input(f"{task} holds {len(tasks)} tasks; name one file")
    from cudal1.eval import evaluate

    with console.status(f"evaluating {candidate.name} against {tasks[0].name}..."):
        result = evaluate(tasks[0], candidate.read_text(), cfg)
    if as_json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
    else:
        console.print(render_eval_result(result))
    raise typer.Exit(_exit_code(result))


@app.command("verify")
def verify_command(
    records: Annotated[Path, typer.Argument(help="CUDA-L1 release file (JSON Lines) or a cudal1 export")],
    device: Annotated[str | None, typer.Option(help="auto | cpu | cuda | cuda:N")] = None,
    workers: Annotated[int, typer.Option(min=1, help="candidates compiled and checked in parallel")] = 4,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="write the full report here; rows stream to PATH's .rows.jsonl")
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="verify only the first N selected records")] = None,
    sample: Annotated[int | None, typer.Option(min=1, help="a random subset of N records (see --seed)")] = None,
    seed: Annotated[int, typer.Option(help="seed of --sample")] = 0,
    levels: Annotated[list[str] | None, typer.Option(help="only these levels, e.g. --levels 1,2")] = None,
    tasks: Annotated[
        list[str] | None, typer.Option(help="only these records, named as the table does, e.g. --tasks L2_4,L3_13")
    ] = None,
    budget_s: Annotated[float | None, typer.Option(help="timing budget per record, seconds")] = None,
    deadline_s: Annotated[
        float | None, typer.Option(help="start no evaluation after this many seconds; the rest are 'not run'")
    ] = None,
    config: Annotated[Path | None, typer.Option(help="YAML EvalConfig")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="config override, e.g. timing.min_samples=5")] = None,
    verbose: Annotated[bool, typer.Option("-v", "--verbose")] = False,
) -> None:
    """Re-measure every record's candidate against its reference on this machine.

    Claimed speedups in RECORDS were measured elsewhere (another GPU, another evaluator). Each \
candidate goes through the full evaluator (static checks, compile, correctness, paired timing, \
integrity guards); a table puts claimed and measured speedup side by side with every finding. \
Records without code ("None") are listed as "no code".

    Selection: --levels and --tasks, then --sample, then --limit. With --json PATH, each finished row is \
appended to PATH's .rows.jsonl at once, so a killed run loses nothing it finished; PATH itself \
is written at the end.

    Exit 0 when the run completes, whatever the verdicts (records left "not run" by --deadline-s \
included); 2 for bad input.
    """
    from cudal1.report.verify import Selection, render_rows, render_summary, run_verify, summarize
    from cudal1.tasks import TaskError

    _logging(verbose)
    overrides = [*(set_ or []), *([f"timing.budget_s={budget_s}"] if budget_s is not None else [])]
    cfg = _eval_config(config, overrides, device)
    if not records.is_file():
        raise _bad_input(f"{records}: no such records file")
    try:
        wanted = frozenset(int(x) for item in levels or [] for x in item.split(",") if x.strip())
    except ValueError:
        raise _bad_input(f"--levels {levels}: expected level numbers, e.g. 1,2") from None
    names = frozenset(x.strip() for item in tasks or [] for x in item.split(",") if x.strip())
    selection = Selection(levels=wanted, names=names, sample=sample, seed=seed, limit=limit)

    def echo(line: str) -> None:
        console.print(line, markup=False, highlight=False, soft_wrap=True)

    try:
        rows, _ = run_verify(
            records, selection, cfg, workers=workers, json_path=json_path, deadline_s=deadline_s, echo=echo
        )
    except TaskError as exc:
        raise _bad_input(str(exc)) from None
    console.print(render_rows(rows))
    console.print(render_summary(summarize(rows)))
    if json_path:
        console.print(f"report: {json_path} (rows as they finished: {json_path.stem}.rows.jsonl)")


def _register_optimize() -> None:
    from cudal1.cli_optimize import register

    register(app)


_register_optimize()


def _logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
