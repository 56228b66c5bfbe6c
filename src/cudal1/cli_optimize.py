"""``cudal1 optimize`` and ``cudal1 runs show``: the search loop from the command line.

``register(app)`` adds the commands to the main typer app. Exit codes follow ``cudal1.cli``:
0 the run completed (a budget that stopped it early included), 2 bad input (LLM spec, endpoint,
run directory, task, config), 130 interrupted (the run is resumable with ``--resume``).
"""

from __future__ import annotations

import json
import logging
import signal
import sys
from pathlib import Path
from typing import Annotated, Any, Literal, cast

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from cudal1.config import load_config
from cudal1.schema import Task
from cudal1.search.loop import OptimizeConfig

console = Console()
err_console = Console(stderr=True)

EXIT_OK, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 2, 130

runs_app = typer.Typer(help="Inspect optimisation runs.", no_args_is_help=True)


def _bad_input(message: str) -> typer.Exit:
    err_console.print(f"[red]error:[/red] {message}")
    return typer.Exit(EXIT_BAD_INPUT)


def _logging(verbose: bool) -> None:
    """Warnings (INFO with -v) on stderr above the progress bars; the run's log file gets INFO."""
    handler = RichHandler(
        console=err_console, show_path=False, level=logging.INFO if verbose else logging.WARNING
    )
    logging.basicConfig(level=logging.WARNING, handlers=[handler])  # no-op where logging is configured


def resolve_config(base: Path | None, overrides: list[str], flags: dict[str, Any]) -> OptimizeConfig:
    """Config from a YAML file (or defaults), then ``--set`` overrides, then the explicit flags."""
    try:
        cfg: OptimizeConfig = load_config(OptimizeConfig, base, overrides)
        data = cfg.model_dump(mode="json")
        for dotted, value in flags.items():
            if value is None:
                continue
            node = data
            *parents, leaf = dotted.split(".")
            for part in parents:
                node = node[part]
            node[leaf] = value
        return OptimizeConfig.model_validate(data)
    except (ValueError, OSError) as exc:
        raise _bad_input(f"config: {exc}") from None


class ProgressView:
    """Renders loop events as one rich progress bar per task, with its live best speedup."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.bars: dict[str, TaskID] = {}

    def __call__(self, kind: str, payload: dict[str, Any]) -> None:
        if kind == "run_start":
            for name, plan in payload["tasks"].items():
                self.bars[name] = self.progress.add_task(
                    name, total=plan["total"], completed=plan["done"], best=""
                )
        elif kind == "evaluated" and payload["task"] in self.bars:
            best = payload.get("best_speedup")
            text = (
                f"best {best:.3f}x ({payload.get('best_label')})"
                if best is not None
                else "no correct candidate yet"
            )
            self.progress.update(self.bars[payload["task"]], completed=payload["done"], best=text)
        elif kind == "parse_failed" and payload["task"] in self.bars:
            self.progress.update(self.bars[payload["task"]], completed=payload["done"])
        elif kind == "stopped":
            self.progress.console.print(
                f"[yellow]budget {payload['reason']} reached: finishing what is under way[/yellow]"
            )
        elif kind == "final" and payload["task"] in self.bars:
            speedup = payload.get("speedup")
            text = f"final {speedup:.3f}x ({payload['label']})" if speedup is not None else "final: not ok"
            self.progress.update(self.bars[payload["task"]], best=text)


def optimize_command(
    out: Annotated[Path, typer.Option("--out", help="run directory (config, database, logs, best kernels)")],
    tasks: Annotated[
        str | None,
        typer.Argument(
            help="task file, KernelBench directory, records file or bundled task name; default: bundled suite"
        ),
    ] = None,
    llm: Annotated[
        str | None,
        typer.Option(help="openai:MODEL | hf:PATH | scripted:FILE; default: built-in baselines only"),
    ] = None,
    rounds: Annotated[int | None, typer.Option(help="LLM rounds per task")] = None,
    samples: Annotated[int | None, typer.Option(help="samples per task per round")] = None,
    resume: Annotated[bool, typer.Option(help="continue the run in --out with its saved config")] = False,
    device: Annotated[str | None, typer.Option(help="auto | cpu | cuda | cuda:N")] = None,
    size: Annotated[str | None, typer.Option(help="bundled task sizes: auto (by device), gpu or cpu")] = None,
    config: Annotated[Path | None, typer.Option(help="YAML OptimizeConfig")] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="config override, e.g. budget.max_wall_s=3600")
    ] = None,
    verbose: Annotated[bool, typer.Option("-v", "--verbose")] = False,
) -> None:
    """Search faster variants of TASKS: baselines, then contrastive LLM rounds; re-check the best."""
    from cudal1.llm import LLMError
    from cudal1.search.run import CONFIG_FILE, OptimizeError, optimize

    _logging(verbose)
    if size is not None and size not in ("auto", "gpu", "cpu"):
        raise _bad_input("--size must be auto, gpu or cpu")
    saved = out / CONFIG_FILE
    resuming = resume and saved.is_file()
    if resuming and config is not None:
        raise _bad_input(
            "--config cannot be combined with --resume: the run keeps its saved config (use --set)"
        )
    flags = {"llm.spec": llm, "rounds": rounds, "samples": samples, "eval.device": device, "size": size}
    cfg = resolve_config(saved if resuming else config, set_ or [], flags)
    task_list = _tasks(tasks, cfg, out if resuming else None)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[best]}"),
        TimeElapsedColumn(),
    )
    # SIGTERM (a job scheduler's timeout, `timeout`, `kill`) unwinds like Ctrl-C, so the run's
    # bookkeeping (wall time) is saved and the workers are shut down before exiting.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        with Progress(*columns, console=err_console, transient=False) as progress:
            summary = optimize(task_list, out, cfg, resume=resume, progress=ProgressView(progress))
    except (OptimizeError, LLMError) as exc:
        raise _bad_input(str(exc)) from None
    except KeyboardInterrupt:
        err_console.print(
            f"[yellow]interrupted[/yellow]: continue with `cudal1 optimize --out {out} --resume`"
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None
    from cudal1.report.runs import render_run_summary

    console.print(render_run_summary(summary))
    raise typer.Exit(EXIT_OK)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _tasks(spec: str | None, cfg: OptimizeConfig, run_dir: Path | None) -> list[Task]:
    """TASKS as named; on resume with none named, the tasks the run started with."""
    from cudal1 import cli
    from cudal1.search.run import OptimizeError, load_run_tasks

    if spec is None and run_dir is not None:
        try:
            return load_run_tasks(run_dir)
        except OptimizeError as exc:
            raise _bad_input(str(exc)) from None
    size = cli._size_for(cast(Literal["auto", "gpu", "cpu"], cfg.size), cfg.eval.device)
    return cli.load_task_set(spec, size)


@runs_app.command("show")
def runs_show(
    run: Annotated[Path, typer.Argument(help="run directory")],
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as JSON")] = False,
) -> None:
    """Summarise a run (finished, running or killed): per-task best speedup and the run's spend."""
    from cudal1.report.runs import render_run_summary
    from cudal1.search.run import OptimizeError, load_run_summary

    if not run.is_dir():
        raise _bad_input(f"{run}: no such run directory")
    try:
        summary = load_run_summary(run)
    except OptimizeError as exc:
        raise _bad_input(str(exc)) from None
    if as_json:
        sys.stdout.write(json.dumps(summary.to_dict(), indent=2) + "\n")
    else:
        console.print(render_run_summary(summary))


def register(app: typer.Typer) -> None:
    """Add ``optimize`` and the ``runs`` group to ``app``."""
    app.command("optimize")(optimize_command)
    app.add_typer(runs_app, name="runs")
