"""A run's kernels as records (``cudal1 export``): JSON Lines that ``cudal1 verify`` re-measures on
another machine and that ``--seed`` starts another run from (``tasks.cuda_l1`` reads both).

One record per kernel, in the export layout of ``tasks.cuda_l1``: ``task``, ``level``,
``ref_code`` (the task's source as the run stored it, so a record matches the task by its hash),
``custom_code``, ``claimed_speedup``, ``label``, ``origin`` (the TASK's origin, one of
``schema.TASK_ORIGINS``) and ``provenance`` (the candidate's chain, ``seed cuda-l1:h100 >
cuda-graph``); then where it was measured: ``device``, ``gpu``, ``speedup`` with ``ci_low`` and
``ci_high``, ``run`` and ``candidate_id``. ``claimed_speedup`` is the speedup measured here: on
another GPU ``verify`` puts it beside its own measurement, as it does for a release's claims.

Which kernels: by default each task's kept kernel, only where it beat the reference beyond its
interval (``TaskRecord.faster``, on the final re-evaluation's numbers when the task has one);
with ``every``, every verified candidate of the run (the reference anchor left out: it is the
task itself). Tasks with nothing to export are left out and named in the summary.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudal1.run.database import CandidateDB
from cudal1.run.directory import RunDirectory, RunError, every_final, stored_tasks
from cudal1.run.records import task_records
from cudal1.run.rows import CandidateRow
from cudal1.run.selection import REFERENCE_LABEL
from cudal1.schema import EvalResult, Task

Record = dict[str, Any]


class ExportError(RunError):
    """A run that cannot be exported as asked (nothing to export, an unwritable file)."""


@dataclass(frozen=True)
class ExportSummary:
    out: Path
    records: int
    tasks: tuple[str, ...]  # tasks with at least one record
    left_out: tuple[str, ...]  # tasks with nothing to export


def export_kernels(run_dir: Path, out: Path, *, every: bool = False) -> ExportSummary:
    """Write the run's kept kernels (``every``: its verified candidates) to ``out`` as JSON Lines.

    RunError when ``run_dir`` is not a run; ExportError when nothing beat the reference (an
    empty file would be no records file) or ``out`` cannot be written.
    """
    run = RunDirectory(run_dir)
    with run.open_db() as db:
        tasks = stored_tasks(db)
        pairs = _every_verified(db, tasks) if every else _kept(db)
        records = [_record(tasks[row.task], row, result, run.path) for row, result in pairs]
    exported = tuple(dict.fromkeys(r["task"] for r in records))
    left_out = tuple(name for name in tasks if name not in exported)
    if not records:
        what = "no verified candidate" if every else "no task's kept kernel beat the reference (try --all)"
        raise ExportError(f"{run.path}: nothing to export: {what}")
    _write(out, records)
    return ExportSummary(out, len(records), exported, left_out)


def _kept(db: CandidateDB) -> list[tuple[CandidateRow, EvalResult]]:
    """Each task's kept kernel with its reported measurement, where it beat the reference."""
    return [
        (t.best, t.measured)
        for t in task_records(db)
        if t.faster and t.best is not None and t.measured is not None
    ]


def _every_verified(db: CandidateDB, tasks: dict[str, Task]) -> list[tuple[CandidateRow, EvalResult]]:
    """Every verified candidate but the reference anchor, with its latest measurement (the final
    re-evaluation's for those that had one; dropped when a final failed)."""
    out = []
    for name in tasks:
        finals = every_final(db, name)
        for row in db.evaluated(name):
            result = finals.get(row.id) or row.result
            if row.label != REFERENCE_LABEL and result is not None and result.ok:
                out.append((row, result))
    return out


def provenance_chain(row: CandidateRow) -> str:
    """Where a candidate came from, as a chain: its stored origin, else the model that wrote it
    (``openai:MODEL``), else its label."""
    if row.origin:
        return row.origin
    if row.model:
        return row.model if row.model.startswith(f"{row.backend}:") else f"{row.backend}:{row.model}"
    return row.label


def _record(task: Task, row: CandidateRow, result: EvalResult, run_dir: Path) -> Record:
    timing = result.timing
    return {
        "task": task.name,
        "level": task.level,
        "ref_code": task.source,
        "custom_code": row.source,
        "claimed_speedup": result.speedup,
        "label": row.label,
        "origin": task.origin,
        "provenance": provenance_chain(row),
        "device": result.device,
        "gpu": result.environment.gpu,
        "speedup": result.speedup,
        "ci_low": timing.ci_low if timing else None,
        "ci_high": timing.ci_high if timing else None,
        "run": str(run_dir.resolve()),
        "candidate_id": row.id,
    }


def _write(out: Path, records: list[Record]) -> None:
    """All the records or none: written beside ``out``, then moved over it."""
    text = "".join(json.dumps(r) + "\n" for r in records)
    partial = out.with_name(f".{out.name}.partial")
    try:
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, out)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise ExportError(f"{out}: cannot write: {exc.strerror or exc}") from None
