"""Seed files: kernels a run starts from (``--seed FILE``), read and matched to the run's tasks.

A seed file is a CUDA-L1 release file or a cudal1 export (both read by
``cuda_l1.load_cuda_l1_records``: records with their reference and claimed speedup), or a
directory of candidate files named ``<task name>.py``.

Matching: a record matches a run's task when its reference is the task's source (same
``Task.hash``), whatever either is named, so release record ``L1_23`` seeds a bundled task that
holds the same program. A record named like a run's task whose reference differs is another
program under the same name (another size, another version): it is skipped with a warning and
counted, never run against a reference it was not written for. A directory's file has no
reference beside it, so it matches by name. A seed file that matches none of the run's tasks is
an error (a wrong file, or the wrong tasks), as is one that cannot be read.

Nothing here runs or trusts a seed: whether it is correct and fast is the evaluator's verdict,
as for every candidate; a claimed speedup is only carried along.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from cudal1.schema import Candidate, Task
from cudal1.tasks.cuda_l1 import load_cuda_l1_records
from cudal1.tasks.source import TaskError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SeedMatch:
    """What a run's seed files hold for its tasks."""

    kernels: Mapping[str, tuple[Candidate, ...]]  # by the run's task name, in file order
    skipped: tuple[str, ...] = ()  # a line per record skipped: a run task's name, another reference
    without_code: int = 0  # matching records that hold no kernel (the release's "None")

    @property
    def count(self) -> int:
        return sum(len(k) for k in self.kernels.values())


def match_seed_files(paths: Sequence[Path], tasks: Sequence[Task]) -> SeedMatch:
    """The kernels ``paths`` hold for ``tasks``, each with the run's task name; TaskError (naming
    the file) when a file cannot be read, is malformed, or matches none of ``tasks``."""
    kernels: dict[str, list[Candidate]] = {t.name: [] for t in tasks}
    skipped: list[str] = []
    without_code = 0
    for path in paths:
        found, skips, empty = _match_file(Path(path), tasks)
        if not found and not empty:
            raise TaskError(f"{path}: seeds none of the run's tasks ({_names(tasks)}){_why(skips)}")
        skipped.extend(skips)
        without_code += empty
        for name, cands in found.items():
            seen = {c.hash for c in kernels[name]}
            kernels[name].extend(c for c in cands if c.hash not in seen)
    return SeedMatch({n: tuple(k) for n, k in kernels.items() if k}, tuple(skipped), without_code)


def _match_file(path: Path, tasks: Sequence[Task]) -> tuple[dict[str, list[Candidate]], list[str], int]:
    """(kernels by run task, skip lines, matching records without code) of one seed file."""
    if path.is_dir():
        return _match_directory(path, tasks), [], 0
    if not path.exists():
        raise TaskError(f"{path}: no such seed file or directory")
    by_hash: dict[str, list[Task]] = {}
    for t in tasks:
        by_hash.setdefault(t.hash, []).append(t)
    names = {t.name for t in tasks}
    found: dict[str, list[Candidate]] = {}
    skipped: list[str] = []
    without_code = 0
    for record_task, cand in load_cuda_l1_records(path):
        matches = by_hash.get(record_task.hash, [])
        if not matches and record_task.name in names and cand is not None:
            skipped.append(f"{path}: {record_task.name}: same name as a run task, another reference")
            logger.warning("seed %s: skipped, its reference differs from the run's task", skipped[-1])
        for task in matches:
            if cand is None:
                without_code += 1
            else:
                found.setdefault(task.name, []).append(replace(cand, task_name=task.name))
    return found, skipped, without_code


def _match_directory(path: Path, tasks: Sequence[Task]) -> dict[str, list[Candidate]]:
    files = {f.stem: f for f in sorted(path.glob("*.py")) if f.is_file() and not f.name.startswith("_")}
    if not files:
        raise TaskError(f"{path}: no candidate files (<task name>.py) in this seed directory")
    found: dict[str, list[Candidate]] = {}
    for task in tasks:
        file = files.get(task.name)
        if file is None:
            continue
        try:
            source = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TaskError(f"{file}: cannot read: {exc}") from exc
        found[task.name] = [Candidate(task.name, source, label=path.name, origin=path.name)]
    return found


def _names(tasks: Sequence[Task], most: int = 4) -> str:
    names = [t.name for t in tasks]
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def _why(skipped: list[str]) -> str:
    if not skipped:
        return ""
    return f"; {len(skipped)} record(s) share a task's name but not its reference"
