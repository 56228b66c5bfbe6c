"""``cudal1 collect``: several models write variants of every task (the one-shot generation
prompt); every variant is evaluated and stored with its provenance in the run's candidate
database, the raw material of ``cudal1 dataset export`` (stage 1's data augmentation).

Progress (``cli.progress``, as ``optimize`` shows it): a bar per task on a terminal, a line per
finished evaluation anywhere else. Exit codes (``cli.common``): 0 the run completed (a budget
that stopped it early included), 2 bad input, 130 interrupted (resumable with ``--resume``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from cudal1.cli.common import (
    ADD_TASKS_HELP,
    DEVICES_HELP,
    EXIT_OK,
    POOL_HELP,
    SEED_HELP,
    bad_input,
    console,
    interruptible,
    pool_values,
    resolve_config,
    seed_values,
    session_seeds,
    session_tasks,
    setup_logging,
    size_for,
)
from cudal1.cli.progress import ProgressReporter, ProgressView
from cudal1.config import CollectConfig, Size
from cudal1.eval.ray_pool import RayPoolError
from cudal1.llm import LLMError
from cudal1.run.directory import RunDirectory, RunError
from cudal1.train.collect import collect


def collect_command(
    out: Annotated[Path, typer.Option("--out", help="run directory (config, database, logs)")],
    tasks: Annotated[
        list[str] | None,
        typer.Argument(
            help="task files, KernelBench directories, records files or bundled tasks (several, or"
            " comma-separated); default: bundled",
            show_default=False,
        ),
    ] = None,
    llm: Annotated[
        list[str] | None,
        typer.Option("--llm", help="a model to ask, openai:MODEL | hf:PATH | scripted:FILE (repeatable)"),
    ] = None,
    samples: Annotated[int | None, typer.Option(help="samples per task per model")] = None,
    resume: Annotated[
        bool, typer.Option(help="continue the run in --out with its saved config and, by default, its tasks")
    ] = False,
    add_tasks: Annotated[bool, typer.Option(help=ADD_TASKS_HELP)] = False,
    device: Annotated[str | None, typer.Option(help="auto | cpu | cuda | cuda:N")] = None,
    devices: Annotated[str | None, typer.Option(help=DEVICES_HELP)] = None,
    pool: Annotated[str | None, typer.Option(help=POOL_HELP)] = None,
    size: Annotated[Size | None, typer.Option(help="bundled task sizes (auto: by device)")] = None,
    seed: Annotated[list[Path] | None, typer.Option("--seed", metavar="FILE", help=SEED_HELP)] = None,
    config: Annotated[Path | None, typer.Option(help="YAML CollectConfig")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="config override, e.g. samples=8")] = None,
    verbose: Annotated[bool, typer.Option("-v", "--verbose")] = False,
) -> None:
    """Ask every --llm model for variants of TASKS with the generation prompt; evaluate and store \
all of them with their provenance (model, prompt, tokens). --seed FILE adds published or exported \
kernels to round 0 (as in `cudal1 optimize`), evaluated and stored the same way."""
    setup_logging(verbose)
    saved = RunDirectory(out).config_file
    resuming = resume and saved.is_file()
    flags: dict[str, Any] = {"samples": samples, "eval.device": device, "size": size}
    flags.update(pool_values(pool, devices))
    flags.update(seed_values(seed))
    if llm:
        flags["llms"] = [{"spec": spec} for spec in llm]
    cfg = resolve_config(CollectConfig, saved if resuming and config is None else config, set_, flags)
    task_list = session_tasks(
        tasks, out, resume=resume, add=add_tasks, size=size_for(cfg.size, cfg.eval.device)
    )
    seeds = session_seeds(cfg.seed_files, task_list)
    try:
        with interruptible(f"`cudal1 collect --out {out} --resume`"), ProgressReporter() as progress:
            counts = collect(task_list, out, cfg, resume=resume, seeds=seeds, progress=ProgressView(progress))
    except (RunError, LLMError, RayPoolError) as exc:
        raise bad_input(str(exc)) from None
    for name, c in counts.items():
        console.print(
            f"{name}: {c['evaluated']} evaluated, {c['correct']} correct, {c['faster']} faster,"
            f" {c['parse_failed']} without usable code"
        )
    raise typer.Exit(EXIT_OK)
