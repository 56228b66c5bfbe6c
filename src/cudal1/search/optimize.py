"""The ``optimize`` command's run: start or resume it in its directory, run the contrastive search
(``contrastive.Search`` with a ``ContrastivePlan``), re-evaluate each task's best, write the
kept kernels. The run directory itself (its files, its database, reading it back) is
``cudal1.run``'s; this module only orchestrates one optimize session.

After the search, each task's best candidate (``run.selection.choose_best``) is evaluated again
under the strict ``final`` budget, outside any search budget (one evaluation per task); the
reported numbers are that evaluation's, and the candidate is marked ``final`` in the database.
A best that fails its final re-evaluation (incorrect or rejected in a fresh build: a
torch.compile max-autotune kernel of L3_48 did, on an H100) is never kept: the next fastest is
re-evaluated in its place, up to ``final.attempts`` candidates per task and session. A best whose
final's interval lies below a runner-up's search speedup has that runner-up re-evaluated too
(``run.selection.challenger``), and the task keeps the faster final (``choose_kept``), so a
kept kernel is compared with its rivals' finals, not with their searches' luck (on an H200 a
torch.compile kernel gave 4.79x in the search and 1.73x in its fresh build's final).

A run never recommends a slowdown: unless that measurement beats the reference beyond its
interval (the lower end of its 95% CI above 1.0), the task's result is "no faster variant found"
and ``best/<task>.py`` is the reference itself (``run.records.TaskRecord.faster``).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cudal1.config import OptimizeConfig
from cudal1.eval.pool import Pool
from cudal1.eval.pool_kinds import make_pool
from cudal1.llm import CallRecord, Ledger, LLMBackend, Message, SamplingParams, create_backend
from cudal1.run.database import CandidateDB
from cudal1.run.directory import (
    RunDirectory,
    RunError,
    add_wall_time,
    failed_finals,
    final_record,
    passed_finals,
    record_failed_final,
    record_final,
    start_session,
    stored_tasks,
)
from cudal1.run.events import ProgressCallback, RunDone, RunStarted, TaskFinal, TaskPlan
from cudal1.run.records import RunRecord, read_run
from cudal1.run.rows import CandidateRow
from cudal1.run.selection import challenger, choose_kept, why_not_ok
from cudal1.schema import EvalRequest, EvalResult, Task
from cudal1.search.budget import Budget
from cudal1.search.contrastive import ContrastivePlan, Search
from cudal1.search.seeds import SeedSet, load_seeds, reference_anchor, store_late_seeds

log = logging.getLogger(__name__)


class OptimizeError(RunError):
    """An optimize run that cannot start as asked (bad LLM spec); nothing was run."""


def optimize(
    tasks: Sequence[Task],
    run_dir: Path,
    config: OptimizeConfig,
    *,
    resume: bool = False,
    backend: LLMBackend | None = None,
    seeds: SeedSet | None = None,
    progress: ProgressCallback | None = None,
) -> RunRecord:
    """Search faster variants of ``tasks`` in ``run_dir`` and re-evaluate each task's best.

    ``backend`` overrides ``config.llm.spec`` (tests inject one); its calls are then recorded in
    the run's ledger. ``seeds`` are ``config.seed_files`` already loaded (the command loads them
    to report what matched); round 0 holds them, and a resumed run whose round 0 is done
    evaluates the ones it does not have yet first. Raises RunError before doing anything when the
    run cannot start (a seed file that cannot be used included), and ``LLMError`` when the
    endpoint fails (the preflight call, or later: everything stored stays).
    """
    run = RunDirectory(run_dir)
    run.check_start(tasks, resume=resume)
    seeds = seeds if seeds is not None else load_seeds(config.seed_files, tasks)
    backend = backend if backend is not None else _make_backend(config.llm.spec, config.llm.options)
    preflight = _preflight(backend) if backend is not None and config.llm.preflight else []
    started = time.monotonic()
    with run.session() as db:
        plan = ContrastivePlan(config, backend, seeds)
        run_id, budget = _start_session(run, db, tasks, config, plan, preflight, resume)
        store_late_seeds(db, tasks, seeds, run_id)
        if progress is not None:
            progress(
                RunStarted({t.name: TaskPlan(plan.expected(t), db.counts(t.name).dealt_with) for t in tasks})
            )
        try:
            with make_pool(config.eval, config.pool) as pool, _stopping_said(pool):
                search = Search(db, pool, plan, budget, progress=progress, run_id=run_id)
                asyncio.run(search.run(tasks))
            db.set_meta("stop_reason", budget.stop_reason or "")
            _final_round(db, tasks, config, progress)
        finally:
            add_wall_time(db, time.monotonic() - started)
        db.set_meta("complete", "1")
        record = _write_outputs(run, db, config)
    if progress is not None:
        progress(RunDone(str(run.path)))
    return record


# -- start-up --------------------------------------------------------------------------------------


def _make_backend(spec: str | None, options: dict[str, Any]) -> LLMBackend | None:
    if spec is None:
        return None
    try:
        return create_backend(spec, **options)
    except (ValueError, ImportError) as exc:
        raise OptimizeError(f"--llm {spec}: {exc}") from None


class _MemoryLedger(Ledger):
    """Keeps its records, so a call made before the run directory exists can be written later."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[CallRecord] = []

    def record(self, rec: CallRecord) -> None:
        super().record(rec)
        self.records.append(rec)


def _preflight(backend: LLMBackend) -> list[CallRecord]:
    """One tiny call, before anything is written: a dead endpoint fails now, not after round 0."""

    async def ping() -> None:
        try:
            await backend.complete(
                [Message("user", "Reply with OK.")], SamplingParams(temperature=0.0, max_tokens=1)
            )
        finally:
            await backend.aclose()

    kept, memory = backend.ledger, _MemoryLedger()
    backend.ledger = memory
    try:
        asyncio.run(ping())
    finally:
        backend.ledger = kept
    return memory.records


def _start_session(
    run: RunDirectory,
    db: CandidateDB,
    tasks: Sequence[Task],
    config: OptimizeConfig,
    plan: ContrastivePlan,
    preflight: list[CallRecord],
    resume: bool,
) -> tuple[int, Budget]:
    """Record the session (tasks, config, model) and attach the run's ledger; returns its budget."""
    run_id = start_session(db, run, tasks, config, note="resume" if resume else "")
    db.set_meta("complete", "0")
    before = run.ledger_totals()
    ledger = run.ledger()
    for record in preflight:
        ledger.record(record)
    if plan.backend is not None:
        db.set_meta("llm", _describe(plan.backend))
        plan.backend.ledger = ledger
    log.info("run %d in %s: %d tasks, llm %s", run_id, run.path, len(tasks), plan.backend or "none")
    return run_id, Budget.resumed(config.budget, ledger, before, db, tasks)


def _describe(backend: LLMBackend) -> str:
    """``prefix:model`` as a spec would name it (scripted models already carry their prefix)."""
    prefix = f"{backend.name}:"
    return backend.model if backend.model.startswith(prefix) else prefix + backend.model


# -- after the search ------------------------------------------------------------------------------


def _final_round(
    db: CandidateDB, tasks: Sequence[Task], config: OptimizeConfig, progress: ProgressCallback | None
) -> None:
    """Re-evaluate each task's best under the strict budget, unless that was already done; a best
    that fails it is dropped for the next fastest, up to ``final.attempts`` per task."""
    if not config.final.enabled:
        return
    tried: dict[str, int] = {}
    said: set[str] = set()
    todo = _finals_due(db, tasks, tried, config.final.attempts, progress, said)
    if not todo:
        return
    cfg = config.final.apply(config.eval)
    with make_pool(cfg, config.pool, at_most=len(todo), spares=0) as pool, _stopping_said(pool):
        while todo:
            requests = [
                EvalRequest(task, row.source, request_id=key, label=row.label)
                for key, (task, row) in todo.items()
            ]
            for request, result in pool.evaluate_many(requests):
                task, row = todo[request.request_id]
                tried[task.name] = tried.get(task.name, 0) + 1
                if _record_one_final(db, row, result) and progress is not None:
                    progress(TaskFinal.of(row.task, row.label, result))
            todo = _finals_due(db, tasks, tried, config.final.attempts, progress, said)


def _finals_due(
    db: CandidateDB,
    tasks: Sequence[Task],
    tried: dict[str, int],
    attempts: int,
    progress: ProgressCallback | None,
    said: set[str],
) -> dict[str, tuple[Task, CandidateRow]]:
    """The tasks whose kept candidate has no final yet, or has one that a runner-up's search
    figure lies above (``run.selection.challenger``), and this session may still try one. A kept
    candidate re-measured before (it was overtaken, then its overtaker's final came in lower
    still) becomes the task's final again without a new evaluation."""
    due: dict[str, tuple[Task, CandidateRow]] = {}
    for task in tasks:
        rows, failed, passed = db.evaluated(task.name), failed_finals(db, task.name), passed_finals(db, task.name)
        best = choose_kept(rows, failed, passed)
        done = final_record(db, task.name)
        if best is not None and best.id in passed and (done is None or done[0] != best.id):
            record_final(db, best, passed[best.id])
            log.info("%s final: %s kept, re-measured before", task.name, best.label)
            if progress is not None:
                progress(TaskFinal.of(task.name, best.label, passed[best.id]))
        if best is None:
            if progress is not None and task.name not in said:
                said.add(task.name)  # nothing to keep (or every candidate failed its final): said once
                progress(TaskFinal.of(task.name, None, None))
            continue
        target = best if best.id not in passed else challenger(rows, failed, passed, best)
        if target is None:
            continue
        if tried.get(task.name, 0) < attempts:
            due[str(target.id)] = (task, target)
        elif task.name not in said:
            said.add(task.name)
            log.warning("%s final: %d candidates tried; a resumed run tries the next", task.name, attempts)
    return due


def _record_one_final(db: CandidateDB, row: CandidateRow, result: EvalResult) -> bool:
    """Store a final re-evaluation; True when it is the task's final. A candidate that failed it
    is not kept (the next fastest is due); an evaluator failure is stored as nothing: the trusted
    side's failure never counts against the candidate, whose final is tried again."""
    outcome = f"{result.speedup:.3f}x" if result.ok else why_not_ok(result)
    if result.evaluator_error:
        log.warning("%s final: %s: the evaluator failed (%s); tried again", row.task, row.label, outcome)
        return False
    if not result.ok:
        record_failed_final(db, row, result)
        log.warning(
            "%s final: %s failed (%s); the next fastest is re-evaluated", row.task, row.label, outcome
        )
        return False
    record_final(db, row, result)
    log.info("%s final: %s %s", row.task, row.label, outcome)
    return True


@contextmanager
def _stopping_said(pool: Pool) -> Iterator[None]:
    """Ctrl-C (or SIGTERM, which the CLI turns into it): say at once, before the pool stops them,
    what becomes of the evaluations under way; the line goes to the console and to run.log."""
    try:
        yield
    except KeyboardInterrupt:
        n = pool.in_flight()
        log.warning(
            "stopping: %d evaluation%s in flight %s cancelled; everything stored is kept (resume with --resume)",
            n, "" if n == 1 else "s", "is" if n == 1 else "are",
        )  # fmt: skip
        raise


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip(".") or "task"


def _write_outputs(run: RunDirectory, db: CandidateDB, config: OptimizeConfig) -> RunRecord:
    """``best/<task>.py``: the kept kernel, which is the reference unless ``TaskRecord.faster``."""
    run.best_dir.mkdir(exist_ok=True)
    record = read_run(run, db, config)
    tasks = stored_tasks(db)
    for t in record.tasks:
        if t.faster and t.best is not None:
            source = t.best.source
        else:
            source = reference_anchor(tasks[t.name])
            log.info("%s: no faster variant found; the exported kernel is the reference", t.name)
        (run.best_dir / f"{_safe_name(t.name)}.py").write_text(source, encoding="utf-8")
    return record
