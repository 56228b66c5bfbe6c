"""What every command shares: the consoles, exit codes, the bad-input error, logging set-up,
task-set loading, config resolution and the interrupt of a resumable run. Commands print through ``console`` (results, on stdout)
and ``err_console`` (errors, progress and log records, on stderr).

Exit codes: 0 success; 1 the candidate failed a stage or is incorrect; 2 bad input (a missing or
broken task, candidate, records file or run directory, a bad option or config, an unusable LLM
spec or endpoint); 3 correct but rejected by an integrity finding; 130 interrupted (a run is
resumable with ``--resume``).
"""

from __future__ import annotations

import inspect
import json
import logging
import signal
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, TypeVar

import typer
from pydantic import BaseModel
from rich.console import Console, RenderableType
from rich.logging import RichHandler
from rich.text import Text

from cudal1.config import ConfigError, Size, Suite, load_config
from cudal1.eval.devices import resolve_device, visible_gpus
from cudal1.report.progress import seeds_line
from cudal1.run.directory import RunDirectory, RunError
from cudal1.schema import Task
from cudal1.search.seeds import SeedError, SeedSet, load_seeds
from cudal1.tasks import TaskError, bundled_tasks, load_tasks

console = Console()
err_console = Console(stderr=True)

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_REJECTED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

# How a command prints its results on stdout: tables fitted to the console (80 columns in a pipe,
# or COLUMNS), GitHub Markdown, or JSON. ``--format json`` is the one way to get JSON on stdout
# (README "Commands"); an option that writes a file says so in its name (verify --json-out).
OutputFormat = Literal["table", "md", "json"]
FORMAT_HELP = "table (fitted to the terminal; 80 columns in a pipe) | md (Markdown) | json"

ADD_TASKS_HELP = "with --resume: also search TASKS the run did not start with"
DEVICES_HELP = "GPUs to evaluate on, one timing lane each: all | 0,1,... (cuda:N); default: --device's one"
POOL_HELP = "local (this machine's devices) | ray (a Ray cluster's GPUs: RAY_ADDRESS or a new local one) | ray://HOST:PORT"

SEED_HELP = (
    "start from the kernels in FILE (repeatable): a CUDA-L1 release file, a `cudal1 export` file or a"
    " directory of <task name>.py; a record seeds the task whose source is its ref_code"
    " (config: seed_files)"
)

C = TypeVar("C", bound=BaseModel)


def bad_input(message: str) -> typer.Exit:
    """Print ``message`` as an error, each of its lines as one; the caller raises the returned
    exit (code 2)."""
    for line in message.splitlines() or [""]:
        # Text: brackets in a message are not markup; soft_wrap: one physical line however
        # long, so that it greps and pastes as one.
        err_console.print(Text.assemble(("error:", "red"), " ", line), soft_wrap=True, highlight=False)
    return typer.Exit(EXIT_BAD_INPUT)


@contextmanager
def interruptible(resume_hint: str) -> Iterator[None]:
    """Run a resumable job inside: Ctrl-C, or SIGTERM (a job scheduler's timeout, `timeout`,
    `kill`), prints ``interrupted: continue with {resume_hint}`` and exits 130.

    SIGTERM is turned into KeyboardInterrupt so that it unwinds the job like Ctrl-C: the run's
    bookkeeping (wall time) is saved and its workers are shut down before exiting, where the
    default action would kill the process on the spot. The previous handler is back afterwards.
    """
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    except KeyboardInterrupt:
        err_console.print(f"[yellow]interrupted[/yellow]: continue with {resume_hint}")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def setup_logging(verbose: bool) -> None:
    """Warnings (INFO with -v) on stderr, above any progress display; a no-op where logging is
    already configured. A run's own log file gets INFO regardless (``search.optimize``)."""
    handler = RichHandler(
        console=err_console, show_path=False, level=logging.INFO if verbose else logging.WARNING
    )
    # The handler shows time and level itself; basicConfig would give it its own format, and
    # every line read "WARNING  WARNING:cudal1.module:message".
    handler.setFormatter(logging.Formatter("%(message)s"))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])


def resolve_config(
    model: type[C], path: Path | None, overrides: list[str] | None, values: Mapping[str, Any] | None = None
) -> C:
    """``model`` from a YAML file (or defaults), then ``--set`` overrides, then the values of
    explicit flags (``{"a.b": value}``; None: flag not given); a bad one is bad input."""
    try:
        cfg = load_config(model, path, overrides or [], values)
    except ConfigError as exc:
        raise bad_input("\n".join(f"config: {problem}" for problem in exc.problems)) from None
    check_devices(cfg)
    return cfg


# The config fields that name torch devices (``config.Device``), wherever they sit in a config.
DEVICE_FIELDS = ("device", "devices", "eval_devices")


def check_devices(cfg: BaseModel, where: str = "") -> None:
    """Every CUDA device ``cfg`` names must exist on this machine: a missing one is bad input
    now, before a run is written or a candidate is blamed for a device it never saw (``eval``
    exited 1 and ``optimize`` reported a complete run of failed variants)."""
    for name, value in cfg:
        if isinstance(value, BaseModel):
            check_devices(value, f"{where}{name}.")
        elif name in DEVICE_FIELDS:
            for device in (value,) if isinstance(value, str) else value:
                _check_device(f"{where}{name}", device)


def _check_device(key: str, device: str) -> None:
    resolved = resolve_device(device)
    if not resolved.startswith("cuda"):
        return
    count = visible_gpus()
    index = int(resolved.partition(":")[2] or 0)
    if count == 0:
        raise bad_input(f"{key} {device}: no CUDA GPU is visible on this machine; use --device cpu or auto")
    if index >= count:
        raise bad_input(f"{key} {device}: not on this machine ({count} GPU(s): cuda:0..cuda:{count - 1})")


def parse_devices(spec: str, visible: int | None = None) -> tuple[str, ...]:
    """``--devices``: ``all`` (every visible GPU) or a comma list of GPU indices (``cuda:N`` also
    accepted), as ``cuda:N`` names; an index that is not visible, a repeat, or no CUDA at all is
    bad input. ``visible``: the GPU count (default: asked of torch)."""
    count = visible_gpus() if visible is None else visible
    if count == 0:
        raise bad_input(f"--devices {spec}: no CUDA GPU is visible (use --device cpu on this machine)")
    if spec.strip() == "all":
        return tuple(f"cuda:{i}" for i in range(count))
    devices: list[str] = []
    for item in (x.strip() for x in spec.split(",")):
        index = item.removeprefix("cuda:")
        if not index.isdigit():
            raise bad_input(f"--devices {spec}: {item!r} is not a GPU index (expected all or e.g. 0,1)")
        if int(index) >= count:
            raise bad_input(f"--devices {spec}: GPU {index} is not visible ({count} GPU(s): 0..{count - 1})")
        if f"cuda:{int(index)}" in devices:
            raise bad_input(f"--devices {spec}: GPU {index} named twice")
        devices.append(f"cuda:{int(index)}")
    return tuple(devices)


def pool_values(pool: str | None, devices: str | None) -> dict[str, Any]:
    """``--pool`` and ``--devices`` as values of a config's ``pool`` section (None: not given)."""
    key = "pool"
    values: dict[str, Any] = {}
    if pool is not None:
        if pool == "local" or pool == "ray":
            values[f"{key}.kind"] = pool
        elif pool.startswith("ray://"):
            values[f"{key}.kind"] = "ray"
            values[f"{key}.ray.address"] = pool
        else:
            raise bad_input(f"--pool {pool}: expected local, ray or ray://HOST:PORT")
    if devices is not None:
        if values.get(f"{key}.kind") == "ray":
            raise bad_input("--devices names this machine's GPUs; a Ray pool uses one actor per cluster GPU")
        values[f"{key}.devices"] = parse_devices(devices)
    return values


def seed_values(seeds: list[Path] | None) -> dict[str, Any]:
    """``--seed`` as the config's ``seed_files`` (absolute, so that a resumed session finds them
    from anywhere); empty when not given, so a resumed run keeps its saved ones."""
    return {"seed_files": [str(p.absolute()) for p in seeds]} if seeds else {}


def session_seeds(paths: Sequence[Path], tasks: Sequence[Task]) -> SeedSet:
    """The seeds of ``paths`` for ``tasks``, with a line on stderr saying what matched; a seed file
    that cannot be used is bad input, before anything runs."""
    try:
        seeds = load_seeds(paths, tasks)
    except SeedError as exc:
        raise bad_input(str(exc)) from None
    if paths:
        err_console.print(seeds_line(seeds, len(tasks)), markup=False, highlight=False, soft_wrap=True)
    return seeds


def size_for(size: Size, device: str) -> Literal["gpu", "cpu"]:
    """The bundled-suite size to load: as asked, or with ``auto`` by the device that will run it."""
    if size != "auto":
        return size
    return "cpu" if resolve_device(device) == "cpu" else "gpu"


def load_task_set(spec: str | None, size: Literal["gpu", "cpu"], suite: Suite = "full") -> list[Task]:
    """A path (task file, KernelBench directory, CUDA-L1 records), a bundled task's name, a
    comma-separated list of those (``3_softmax,5_gelu``) or, with no spec, the bundled suite
    (``suite``: every task, or the quick few). Two different tasks of one name are bad input."""
    if spec is None or spec == "bundled":
        return bundled_tasks(size, suite)
    if Path(spec).exists():  # a path wins, commas in its name included
        return _load_path(Path(spec))
    tasks: list[Task] = []
    unknown: list[str] = []
    for item in (x.strip() for x in spec.split(",")):
        if not item:
            continue
        if Path(item).exists():
            tasks.extend(_load_path(Path(item)))
            continue
        named = [t for t in bundled_tasks(size) if item in (t.name, f"level{t.level}/{t.name}")]
        if named:
            tasks.extend(named)
        else:
            unknown.append(item)
    if unknown or not tasks:
        missing = ", ".join(unknown) or spec
        raise bad_input(
            f"{missing}: no such file, and no bundled task of that name (see `cudal1 tasks list`)"
        )
    return _unique(tasks)


def load_task_specs(specs: Sequence[str] | str | None, size: Literal["gpu", "cpu"], suite: Suite = "full") -> list[Task]:
    """``load_task_set`` of one spec, or of several given apart on the command line
    (``optimize 2_conv_block 1_gemm``, as ``2_conv_block,1_gemm``), merged; none: the suite."""
    if specs is None or isinstance(specs, str):
        return load_task_set(specs, size, suite)
    if not specs:
        return load_task_set(None, size, suite)
    return _unique([t for spec in specs for t in load_task_set(spec, size, suite)])


def session_tasks(
    spec: Sequence[str] | str | None,
    out: Path,
    *,
    resume: bool,
    add: bool,
    size: Literal["gpu", "cpu"],
    suite: Suite = "full",
) -> list[Task]:
    """The tasks of a session in run directory ``out``: for a new run, TASKS as named (default:
    the bundled suite); for a resumed run, with none named the tasks it started with, and named
    tasks only among those unless ``add`` (``--add-tasks``), since a resumed run would otherwise
    take new tasks in without a word."""
    run = RunDirectory(out)
    if add and not resume:
        raise bad_input("--add-tasks adds tasks to a resumed run: pass --resume as well")
    if not (resume and run.db_file.is_file()):
        return load_task_specs(spec, size, suite)
    try:
        started = run.load_tasks()
    except RunError as exc:
        raise bad_input(str(exc)) from None
    if not spec:
        return started
    named = load_task_specs(spec, size, suite)
    new = [t.name for t in named if t.name not in {s.name for s in started}]
    if new and not add:
        raise bad_input(
            f"--resume: {', '.join(new)} {'is' if len(new) == 1 else 'are'} not among the tasks {out} started"
            f" with ({_listed([t.name for t in started])}); pass --add-tasks to add them to this run,"
            " or choose another --out for a new run"
        )
    return named


def _listed(names: list[str], most: int = 8) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _load_path(path: Path) -> list[Task]:
    try:
        return load_tasks(path)
    except TaskError as exc:
        raise bad_input(str(exc)) from None


def _unique(tasks: list[Task]) -> list[Task]:
    """``tasks`` with repeats of one task dropped; two different tasks of one name are bad input
    (results are stored by task name)."""
    seen: dict[str, Task] = {}
    for task in tasks:
        other = seen.setdefault(task.name, task)
        if other.hash != task.hash:
            where = " and ".join(t.path or "the bundled suite" for t in (other, task))
            raise bad_input(f"two different tasks are named {task.name!r}: {where}")
    return list(seen.values())


def print_result(
    fmt: OutputFormat,
    table: Callable[[int], RenderableType],
    markdown: Callable[[], str],
    data: Callable[[], object],
) -> None:
    """Print a command's result on stdout in ``fmt``: ``table(width)``, ``markdown()`` or ``data()``."""
    if fmt == "json":
        sys.stdout.write(json.dumps(data(), indent=2, default=_jsonable) + "\n")
    elif fmt == "md":
        sys.stdout.write(markdown())
    else:
        console.print(table(console.width))


def _jsonable(value: Any) -> Any:
    # As a report file is written (``search.verify.write_json``): ``--format json > FILE`` and
    # ``--json-out FILE`` hold the same data.
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def reflow_help(app: typer.Typer) -> None:
    """Join the lines of each paragraph in every command's docstring, so that ``--help`` wraps
    prose to the terminal instead of keeping the source's line breaks mid-sentence; list items
    and indented lines keep their own lines."""
    for info in app.registered_commands:
        if info.callback is not None and info.callback.__doc__:
            info.callback.__doc__ = _reflow(inspect.cleandoc(info.callback.__doc__))
    for group in app.registered_groups:
        if group.typer_instance is not None:
            reflow_help(group.typer_instance)


def _reflow(text: str) -> str:
    paragraphs = []
    for para in text.split("\n\n"):
        lines: list[str] = []
        for line in para.splitlines():
            line = line.rstrip().removesuffix("\\").rstrip()
            if lines and not line.startswith(("- ", " ", "* ")):
                lines[-1] += " " + line.strip()
            else:
                lines.append(line)
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)
