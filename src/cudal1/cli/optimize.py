"""``cudal1 optimize``: search faster variants of a task set in a run directory, with live
progress, then print the run's summary and write it to the run's ``summary.json``.

Exit codes (``cli.common``): 0 the run completed (a budget that stopped it early included),
2 bad input (LLM spec, endpoint, run directory, task, config), 130 interrupted (the run is
resumable with ``--resume``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cudal1.cli.common import (
    ADD_TASKS_HELP,
    DEVICES_HELP,
    EXIT_OK,
    FORMAT_HELP,
    POOL_HELP,
    SEED_HELP,
    OutputFormat,
    bad_input,
    interruptible,
    pool_values,
    print_result,
    resolve_config,
    seed_values,
    session_seeds,
    session_tasks,
    setup_logging,
    size_for,
)
from cudal1.cli.progress import ProgressReporter, ProgressView
from cudal1.config import OptimizeConfig, Size, Suite
from cudal1.eval.ray_pool import RayPoolError
from cudal1.llm import LLMError
from cudal1.report.runs import render_run_json, render_run_markdown, render_run_summary, summarize_run
from cudal1.run.directory import RunDirectory, RunError
from cudal1.search.optimize import optimize


def optimize_command(
    out: Annotated[Path, typer.Option("--out", help="run directory (config, database, logs, best kernels)")],
    tasks: Annotated[
        list[str] | None,
        typer.Argument(
            help="task files, KernelBench directories, records files or bundled task names (several, or"
            " comma-separated); default: bundled suite",
            show_default=False,
        ),
    ] = None,
    llm: Annotated[
        str | None,
        typer.Option(help="openai:MODEL | hf:PATH | scripted:FILE; default: built-in baselines only"),
    ] = None,
    rounds: Annotated[int | None, typer.Option(help="LLM rounds per task")] = None,
    samples: Annotated[int | None, typer.Option(help="samples per task per round")] = None,
    resume: Annotated[
        bool, typer.Option(help="continue the run in --out with its saved config and, by default, its tasks")
    ] = False,
    add_tasks: Annotated[bool, typer.Option(help=ADD_TASKS_HELP)] = False,
    device: Annotated[str | None, typer.Option(help="auto | cpu | cuda | cuda:N")] = None,
    devices: Annotated[str | None, typer.Option(help=DEVICES_HELP)] = None,
    pool: Annotated[str | None, typer.Option(help=POOL_HELP)] = None,
    size: Annotated[Size | None, typer.Option(help="bundled task sizes (auto: by device)")] = None,
    suite: Annotated[
        Suite | None,
        typer.Option(
            help="quick (default): 3 bundled tasks, 4 baselines, 1 s timing; full: all 16 tasks,"
            " every baseline, 10 s timing"
        ),
    ] = None,
    seed: Annotated[list[Path] | None, typer.Option("--seed", metavar="FILE", help=SEED_HELP)] = None,
    a_vs_a: Annotated[
        bool | None,
        typer.Option(
            "--a-vs-a/--no-a-vs-a",
            help="A-vs-A check: state how the reference, measured as its own candidate in every task"
            " (round 0 always holds it), came out: a table of its intervals, and a summary line with"
            " how many contain 1.0, their half-widths against the goal and the clock that decided"
            " (config: a_vs_a)",
        ),
    ] = None,
    config: Annotated[Path | None, typer.Option(help="YAML OptimizeConfig")] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="config override, e.g. budget.max_wall_s=3600")
    ] = None,
    fmt: Annotated[OutputFormat, typer.Option("--format", help=FORMAT_HELP)] = "table",
    verbose: Annotated[bool, typer.Option("-v", "--verbose")] = False,
) -> None:
    """Search faster variants of TASKS: baselines, then contrastive LLM rounds; re-check the best.

    --seed FILE starts round 0 from published or exported kernels as well (a CUDA-L1 release \
file, a `cudal1 export` file, or a directory of <task name>.py): a record seeds the task whose \
source is its ref_code, whatever the names; one whose name matches a task but whose reference \
differs is skipped and counted. Seeds are evaluated like any candidate and kept only if they \
verify. Given with --resume, seeds the run does not have yet are evaluated first."""
    setup_logging(verbose)
    run = RunDirectory(out)
    saved = run.config_file
    resuming = resume and saved.is_file()
    if resuming and config is not None:
        raise bad_input(
            "--config cannot be combined with --resume: the run keeps its saved config (use --set)"
        )
    flags = {
        "llm.spec": llm,
        "rounds": rounds,
        "samples": samples,
        "eval.device": device,
        "size": size,
        "suite": suite,
        "a_vs_a": a_vs_a,
        **pool_values(pool, devices),
        **seed_values(seed),
    }
    cfg = resolve_config(OptimizeConfig, saved if resuming else config, set_, flags)
    if cfg.size == "auto":  # the quick suite's baselines depend on the device: settle it first
        flags["size"] = size_for(cfg.size, cfg.eval.device)
        cfg = resolve_config(OptimizeConfig, saved if resuming else config, set_, flags)
    task_list = session_tasks(
        tasks, out, resume=resume, add=add_tasks, size=size_for(cfg.size, cfg.eval.device), suite=cfg.suite
    )
    seeds = session_seeds(cfg.seed_files, task_list)
    try:
        with interruptible(f"`cudal1 optimize --out {out} --resume`"), ProgressReporter() as progress:
            record = optimize(
                task_list, out, cfg, resume=resume, seeds=seeds, progress=ProgressView(progress)
            )
    except (RunError, LLMError, RayPoolError) as exc:
        raise bad_input(str(exc)) from None
    summary = summarize_run(record)
    run.summary_file.write_text(render_run_json(summary), encoding="utf-8")
    print_result(
        fmt,
        lambda width: render_run_summary(summary, width),
        lambda: render_run_markdown(summary),
        summary.to_dict,
    )
    raise typer.Exit(EXIT_OK)
