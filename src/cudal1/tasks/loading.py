"""Loading tasks from files: one KernelBench-format ``.py``, a KernelBench tree, or a records file.

KernelBench (github.com/ScalingIntelligence/KernelBench) keeps one task per file in directories
``level1/ level2/ ...`` with names like ``1_Square_matrix_multiplication_.py``; the numeric prefix
is the task id. Loaders check every source with ``check_task_source`` (parse only, nothing runs),
so a broken task is reported with its file name when it is loaded rather than deep inside an
evaluation.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from cudal1.schema import Task, TaskOrigin
from cudal1.tasks.cuda_l1 import load_cuda_l1_records
from cudal1.tasks.source import TaskError, check_task_source

logger = logging.getLogger(__name__)

_LEVEL_DIR = re.compile(r"level(\d+)")
_TASK_ID = re.compile(r"(\d+)_")
RECORD_SUFFIXES = (".jsonl", ".json")


def level_of(directory: Path) -> int | None:
    """The N of a directory named ``level<N>``, else None."""
    match = _LEVEL_DIR.fullmatch(directory.name)
    return int(match.group(1)) if match else None


def load_task_file(path: str | Path, origin: TaskOrigin = "file") -> Task:
    """One task file; its name is the file stem and its level comes from a ``level<N>`` parent."""
    path = Path(path)
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"{path}: cannot read: {exc}") from exc
    check_task_source(source, str(path))
    level = level_of(path.parent) or 0
    return Task(name=path.stem, source=source, level=level, path=str(path), origin=origin)


def load_kernelbench_dir(path: str | Path, origin: TaskOrigin = "kernelbench") -> list[Task]:
    """Every task of a KernelBench level directory, or of a root holding ``level<N>`` directories.

    Tasks come sorted by level, then by numeric prefix (files without one last, by name).
    """
    root = Path(path)
    if not root.is_dir():
        raise TaskError(f"{root}: not a directory")
    levels = {d: level for d in root.iterdir() if d.is_dir() and (level := level_of(d)) is not None}
    level_dirs = sorted(levels, key=levels.__getitem__)
    task_dirs = level_dirs if level_of(root) is None and level_dirs else [root]
    tasks = [load_task_file(f, origin) for d in task_dirs for f in sorted(_task_files(d), key=_file_order)]
    if not tasks:
        raise TaskError(f"{root}: no task files (*.py) found")
    _check_unique_names(tasks, root)
    logger.info("loaded %d tasks from %s", len(tasks), root)
    return tasks


def _task_files(directory: Path) -> list[Path]:
    return [f for f in directory.glob("*.py") if f.is_file() and not f.name.startswith("_")]


def _file_order(path: Path) -> tuple[int, int, str]:
    match = _TASK_ID.match(path.name)
    return (0, int(match.group(1)), path.name) if match else (1, 0, path.name)


def _check_unique_names(tasks: list[Task], root: Path) -> None:
    # Results are stored by task name, so two tasks with one name would overwrite each other.
    seen: dict[str, str | None] = {}
    for task in tasks:
        if task.name in seen:
            raise TaskError(f"{root}: task name {task.name!r} is used by {seen[task.name]} and {task.path}")
        seen[task.name] = task.path


def load_tasks(path: str | Path) -> list[Task]:
    """Tasks from a ``.py`` file, a directory (KernelBench layout) or a ``.json``/``.jsonl`` records file.

    A records file may hold several candidates per task; each task is returned once, first seen first.
    """
    path = Path(path)
    if path.is_dir():
        return load_kernelbench_dir(path)
    if not path.is_file():
        raise TaskError(f"{path}: no such file or directory")
    if path.suffix == ".py":
        return [load_task_file(path)]
    if path.suffix in RECORD_SUFFIXES:
        unique: dict[str, Task] = {}
        for task, _ in load_cuda_l1_records(path):
            unique.setdefault(task.name, task)
        return list(unique.values())
    raise TaskError(f"{path}: unknown task format (expected a .py file, a directory, .json or .jsonl)")
