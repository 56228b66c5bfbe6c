"""``cudal1 train sft|selfsup|grpo``: the three training stages of CUDA-L1, each in its own output
directory (config, logs, checkpoints, ``model/``), each resumable.

The stages need the ``[train]`` extra (trl, peft, datasets); they are imported when a stage
runs, so that the rest of the command line works without it. Progress (``cli.progress``): a bar
per stage (per round's fine-tuning for selfsup) on a terminal, a line per logged optimizer step
with its loss (and reward, for GRPO) anywhere else; ``-v`` logs a line per evaluation;
TensorBoard logs go under ``OUT/checkpoints/runs``.

Exit codes (``cli.common``): 0 the stage finished, 2 bad input (model, data, tasks, config, a
missing extra), 130 interrupted (continue with ``--resume``).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
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
    parse_devices,
    pool_values,
    resolve_config,
    seed_values,
    session_seeds,
    session_tasks,
    setup_logging,
    size_for,
)
from cudal1.cli.progress import ProgressReporter, TrainingView
from cudal1.config import GRPOStageConfig, SelfSupConfig, SFTStageConfig
from cudal1.eval.ray_pool import RayPoolError
from cudal1.run.directory import RunError

train_app = typer.Typer(
    help="Train a model to write faster kernels: sft (stage 1), selfsup (stage 2), grpo (stage 3).",
    no_args_is_help=True,
)

ModelOpt = Annotated[
    Path,
    typer.Option(
        "--model", help="local model directory (transformers format), or a LoRA adapter saved by a stage"
    ),
]
OutOpt = Annotated[Path, typer.Option("--out", help="output directory: config, logs, checkpoints, model/")]
TasksOpt = Annotated[
    str | None,
    typer.Option(
        "--tasks",
        help="task file, KernelBench directory, records file or bundled task (several: comma-separated);"
        " default: bundled",
    ),
]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="YAML config of the stage")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="config override, e.g. optim.max_steps=50")]
ResumeOpt = Annotated[
    bool, typer.Option(help="continue from the newest checkpoint in --out, by default with its tasks")
]
AddTasksOpt = Annotated[bool, typer.Option("--add-tasks", help=ADD_TASKS_HELP)]
VerboseOpt = Annotated[bool, typer.Option("-v", "--verbose", help="log every evaluation")]
DevicesOpt = Annotated[str | None, typer.Option("--devices", help=DEVICES_HELP)]
PoolOpt = Annotated[str | None, typer.Option("--pool", help=POOL_HELP)]


def _stage(name: str) -> ModuleType:
    """``cudal1.train.<name>``, or a bad-input exit that names the missing extra."""
    try:
        return importlib.import_module(f"cudal1.train.{name}")
    except ImportError as exc:
        raise bad_input(f"training needs {exc.name}: pip install 'cudal1[train]'") from None


def _run(call: Any, out: Path) -> None:
    """Run a stage with progress (``call(progress)``): SIGTERM unwinds like Ctrl-C; a stage's own
    errors are bad input."""
    errors = _stage("models").TrainError
    try:
        with interruptible(f"the same command and --resume ({out})"), ProgressReporter() as reporter:
            model = call(TrainingView(reporter))
    except (errors, RunError, RayPoolError) as exc:
        raise bad_input(str(exc)) from None
    console.print(f"model saved to {model}")
    raise typer.Exit(EXIT_OK)


def _config_file(config: Path | None, out: Path, resume: bool) -> Path | None:
    """A resumed stage keeps the config it saved (``--set`` still applies) unless one is given."""
    saved = out / "config.yaml"
    return saved if resume and config is None and saved.is_file() else config


@train_app.command("sft")
def sft_command(
    model: ModelOpt,
    data: Annotated[Path, typer.Option("--data", help="dataset directory from `cudal1 dataset export`")],
    out: OutOpt,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Stage 1: supervised fine-tuning on verified variants (completion-only loss, LoRA by default,
    bf16 on a GPU). Trains on the dataset's train split; resumes from OUT's newest checkpoint."""
    setup_logging(verbose)
    cfg = resolve_config(SFTStageConfig, _config_file(config, out, True), set_)
    sft = _stage("sft")
    _run(lambda progress: sft.run_sft(model, data, out, cfg, progress=progress), out)


@train_app.command("selfsup")
def selfsup_command(
    model: ModelOpt,
    out: OutOpt,
    tasks: TasksOpt = None,
    rounds: Annotated[int | None, typer.Option(help="generate -> evaluate -> train rounds")] = None,
    samples: Annotated[int | None, typer.Option(help="samples per task per round")] = None,
    llm: Annotated[
        str | None,
        typer.Option(
            "--llm",
            help="what samples each round: hf:{model} (default: the model the round trains from) | "
            "openai:{model} (a server that serves that checkpoint under its path) | openai:MODEL (a "
            "fixed model, not the one being trained) | scripted:FILE; a server's URL: --set "
            "llm.options.base_url=URL or $OPENAI_BASE_URL",
        ),
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option(help="task prompts in flight at once (llm.concurrency)")
    ] = None,
    device: Annotated[str | None, typer.Option(help="evaluation device: auto | cpu | cuda | cuda:N")] = None,
    devices: DevicesOpt = None,
    pool: PoolOpt = None,
    resume: ResumeOpt = False,
    add_tasks: AddTasksOpt = False,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Stage 2: each round a model answers every task (by default the round's own model through
    local transformers; --llm openai:{model} asks a vLLM or SGLang server, several prompts at once),
    the evaluator keeps the executable and correct answers, and the model is fine-tuned on them.
    Logs each round's success rate; every sample stays in OUT/candidates.db. A server is not
    reloaded by this command: serve OUT/round-N/model before round N+1 (then --resume), or accept
    that a fixed --llm model samples every round."""
    setup_logging(verbose)
    flags = {
        "rounds": rounds,
        "samples": samples,
        "llm.spec": llm,
        "llm.concurrency": concurrency,
        "eval.device": device,
        **pool_values(pool, devices),
    }
    cfg = resolve_config(SelfSupConfig, _config_file(config, out, resume), set_, flags)
    task_list = session_tasks(
        tasks, out, resume=resume, add=add_tasks, size=size_for(cfg.size, cfg.eval.device)
    )
    selfsup = _stage("selfsup")
    _run(
        lambda progress: selfsup.run_selfsup(model, task_list, out, cfg, resume=resume, progress=progress),
        out,
    )


@train_app.command("grpo")
def grpo_command(
    model: ModelOpt,
    out: OutOpt,
    tasks: TasksOpt = None,
    steps: Annotated[int | None, typer.Option(help="optimizer steps (optim.max_steps)")] = None,
    eval_devices: Annotated[
        list[str] | None,
        typer.Option(
            "--eval-devices",
            "--devices",
            help="GPUs the evaluator times on: all | 1,2,... | cuda:N (repeatable)",
        ),
    ] = None,
    pool: PoolOpt = None,
    device: Annotated[str | None, typer.Option(help="training device: auto | cpu | cuda | cuda:N")] = None,
    judge: Annotated[
        str | None, typer.Option(help="reward-checking model: openai:MODEL | hf:PATH | scripted:FILE")
    ] = None,
    seed: Annotated[list[Path] | None, typer.Option("--seed", metavar="FILE", help=SEED_HELP)] = None,
    resume: ResumeOpt = False,
    add_tasks: AddTasksOpt = False,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Stage 3: contrastive GRPO. Prompts are built live from OUT/candidates.db (earlier variants
    with their measured speedups); every completion of a generation batch is evaluated at once
    and rewarded by its verified log-speedup; suspicious rewards go to the reward-checking model
    first. On a GPU the evaluator also times on, generation, training and timing take turns;
    --eval-devices gives the evaluator GPUs of its own. --seed FILE stores published or exported
    kernels with the baselines before the first prompts (as in `cudal1 optimize`)."""
    setup_logging(verbose)
    flags = {
        "optim.max_steps": steps,
        "eval_devices": parse_devices(",".join(eval_devices)) if eval_devices else None,
        **pool_values(pool, None),
        "device": device,
        "audit.judge.spec": judge,
        **seed_values(seed),
    }
    cfg = resolve_config(GRPOStageConfig, _config_file(config, out, resume), set_, flags)
    task_list = session_tasks(
        tasks, out, resume=resume, add=add_tasks, size=size_for(cfg.size, cfg.eval.device)
    )
    seeds = session_seeds(cfg.seed_files, task_list)
    grpo = _stage("grpo")
    try:  # before OUT is written, so that the same command runs again without --resume
        grpo.check_generation(cfg.generation)
    except grpo.TrainError as exc:
        raise bad_input(str(exc)) from None
    _run(
        lambda progress: grpo.run_grpo(
            model, task_list, out, cfg, resume=resume, seeds=seeds, progress=progress
        ),
        out,
    )
