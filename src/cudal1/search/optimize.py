"""One optimisation run in its directory: start or resume it, run the contrastive search
(``contrastive.Search``), re-evaluate each task's best, write the outputs, and read a run back.

The run directory holds ``config.yaml`` (the resolved config), ``candidates.db`` (the state:
every candidate, result, finished round, and the final re-evaluations), ``run.log``,
``llm-calls.jsonl`` (one line per LLM call), ``best/<task>.py``, and ``summary.json`` (the
report of a finished run, written by ``cudal1 optimize`` from ``report.runs``).
Everything a resumed session or ``cudal1 runs show`` needs is read back from those files, so a
killed run loses nothing that was already evaluated. ``optimize`` and ``load_run`` return a
``RunRecord``: the run as its directory holds it, which ``report.runs`` summarises.

After the search, each task's best candidate (``contrastive.choose_best``) is evaluated again under
the strict ``final`` budget, outside any search budget (one evaluation per task); the reported
numbers are that evaluation's, and the candidate is marked ``final`` in the database.

A run never recommends a slowdown: unless that measurement beats the reference beyond its
interval (the lower end of its 95% CI above 1.0), the task's result is "no faster variant found"
and ``best/<task>.py`` is the reference itself (``TaskRecord.faster``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudal1.config import OptimizeConfig, dump_config, load_config
from cudal1.eval.pool_kinds import make_pool
from cudal1.llm import CallRecord, Ledger, LLMBackend, Message, SamplingParams, create_backend
from cudal1.schema import EvalRequest, EvalResult, Task
from cudal1.search.contrastive import (
    Budget,
    ProgressCallback,
    Search,
    beats_reference,
    choose_best,
    device_held_seconds,
    device_seconds,
    final_event,
    reference_anchor,
    seed_candidates,
)
from cudal1.search.database import CandidateDB, CandidateRow, TaskCounts

log = logging.getLogger(__name__)

CONFIG_FILE, DB_FILE, LOG_FILE = "config.yaml", "candidates.db", "run.log"
LEDGER_FILE, BEST_DIR, SUMMARY_FILE = "llm-calls.jsonl", "best", "summary.json"


class OptimizeError(Exception):
    """A run that cannot start as asked (bad run directory, LLM spec or task set); nothing was run."""


@dataclass(frozen=True)
class TaskRecord:
    """What a run holds for one task; ``report.runs.summarize_run`` turns it into a summary row."""

    name: str
    level: int
    best: CandidateRow | None  # ``choose_best`` over the task's evaluated candidates
    final: EvalResult | None  # the final re-evaluation of ``best``, when it has one
    first_result: EvalResult | None  # the task's first stored result (its device, when ``best`` has none)
    counts: TaskCounts
    rounds_done: int
    # Round 0's built-in baselines and the reference anchor, by label: what ``cudal1 report``
    # compares the kept kernel against (same device, same run).
    baselines: tuple[tuple[str, EvalResult], ...] = ()

    @property
    def measured(self) -> EvalResult | None:
        """The measurement the task reports: the final re-evaluation's, else the search's."""
        if self.final is not None:
            return self.final
        return self.best.result if self.best is not None else None

    @property
    def faster(self) -> bool:
        """Whether the run recommends ``best`` (``beats_reference`` on its reported measurement);
        otherwise the task keeps the reference."""
        return self.best is not None and beats_reference(self.best.label, self.measured)


@dataclass(frozen=True)
class RunRecord:
    """A run as its directory holds it: config, LLM spend, bookkeeping and every task's state."""

    run_dir: Path
    config: OptimizeConfig
    llm: str | None  # the backend that ran (``prefix:model``), else the configured spec
    ledger: dict[str, Any]  # ``ledger_totals`` of the run's ledger file
    gpu_seconds: float  # ``device_held_seconds`` over every stored result, final re-evaluations included
    wall_s: float
    stop_reason: str | None
    complete: bool
    tasks: tuple[TaskRecord, ...]


# -- public entry points ---------------------------------------------------------------------------


def optimize(
    tasks: Sequence[Task],
    run_dir: Path,
    config: OptimizeConfig,
    *,
    resume: bool = False,
    backend: LLMBackend | None = None,
    progress: ProgressCallback | None = None,
) -> RunRecord:
    """Search faster variants of ``tasks`` in ``run_dir`` and re-evaluate each task's best.

    ``backend`` overrides ``config.llm.spec`` (tests inject one); its calls are then recorded in
    the run's ledger. Raises OptimizeError before doing anything when the run cannot start, and
    ``LLMError`` when the endpoint fails (the preflight call, or later: everything stored stays).
    """
    run_dir = Path(run_dir)
    check_start(tasks, run_dir, resume)
    backend = backend if backend is not None else _make_backend(config.llm.spec, config.llm.options)
    preflight = _preflight(backend) if backend is not None and config.llm.preflight else []
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with run_log(run_dir / LOG_FILE), CandidateDB(run_dir / DB_FILE) as db:
        run_id, budget = _start_session(run_dir, db, tasks, config, backend, preflight, resume)
        if progress is not None:
            plan = {t.name: {"total": _expected(t, config, backend), "done": _done(db, t)} for t in tasks}
            progress("run_start", {"tasks": plan})
        try:
            _search(db, tasks, config, budget, backend, progress, run_id)
            db.set_meta("stop_reason", budget.stop_reason or "")
            _final_round(db, tasks, config, progress)
        finally:
            wall = float(db.get_meta("wall_s") or 0) + time.monotonic() - started
            db.set_meta("wall_s", f"{wall:.3f}")
        db.set_meta("complete", "1")
        record = _write_outputs(run_dir, db, config)
    if progress is not None:
        progress("run_done", {"run_dir": str(run_dir)})
    return record


def load_run_config(run_dir: Path) -> OptimizeConfig:
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise OptimizeError(f"{run_dir}: no {CONFIG_FILE}; not a cudal1 run directory")
    config: OptimizeConfig = load_config(OptimizeConfig, path)
    return config


def load_run_tasks(run_dir: Path) -> list[Task]:
    """The tasks a run was started with (what a resumed run searches when none are named)."""
    with _open_db(run_dir) as db:
        return [Task(**d) for d in _stored_tasks(db).values()]


def load_run(run_dir: Path) -> RunRecord:
    """The run as its directory holds it now (so a running or killed run shows its progress)."""
    run_dir = Path(run_dir)
    config = load_run_config(run_dir)
    with _open_db(run_dir) as db:
        return read_run(run_dir, db, config)


def ledger_totals(path: Path) -> dict[str, Any]:
    """Calls, tokens and cost recorded in a ledger file (every session of a run)."""
    totals: dict[str, Any] = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}
    if not path.is_file():
        return totals
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            totals["calls"] += 1
            totals["prompt_tokens"] += int(rec.get("prompt_tokens") or 0)
            totals["completion_tokens"] += int(rec.get("completion_tokens") or 0)
            totals["cost_usd"] += float(rec.get("cost_usd") or 0.0)
    return totals


# -- start-up --------------------------------------------------------------------------------------


def check_start(tasks: Sequence[Task], run_dir: Path, resume: bool) -> None:
    if not tasks:
        raise OptimizeError("no tasks to optimise")
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise OptimizeError(f"task names must be unique: {sorted({n for n in names if names.count(n) > 1})}")
    if run_dir.exists() and not run_dir.is_dir():
        raise OptimizeError(f"{run_dir} is not a directory")
    if not (run_dir.is_dir() and any(run_dir.iterdir())):
        return
    if not resume:
        raise OptimizeError(
            f"{run_dir} exists and is not empty: pass --resume to continue that run, or choose another --out"
        )
    if not (run_dir / DB_FILE).is_file():
        raise OptimizeError(
            f"{run_dir} is not a cudal1 run directory (no {DB_FILE}); refusing to write there"
        )


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


class _Forward(logging.Handler):
    """Passes records on to the parent logger's handlers, at the level the caller had configured."""

    def __init__(self, parent: logging.Logger, level: int) -> None:
        super().__init__(level)
        self.parent = parent

    def emit(self, record: logging.LogRecord) -> None:
        self.parent.handle(record)


@contextlib.contextmanager
def run_log(path: Path) -> Iterator[None]:
    """``cudal1`` records at INFO and above go to the run's log file while the run lasts.

    The package logger is lowered to INFO for that, without changing what the caller's own
    handlers show: propagation is replaced by a forwarder that keeps the caller's level.
    """
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    package = logging.getLogger("cudal1")
    level, propagate = package.level, package.propagate
    forward = _Forward(package.parent or logging.getLogger(), package.getEffectiveLevel())
    package.addHandler(handler)
    if propagate:
        package.addHandler(forward)
        package.propagate = False
    package.setLevel(min(logging.INFO, package.getEffectiveLevel()))
    try:
        yield
    finally:
        package.removeHandler(handler)
        package.removeHandler(forward)
        package.setLevel(level)
        package.propagate = propagate
        handler.close()


@contextlib.contextmanager
def _open_db(run_dir: Path) -> Iterator[CandidateDB]:
    path = Path(run_dir) / DB_FILE
    if not path.is_file():
        raise OptimizeError(f"{run_dir}: no {DB_FILE}; not a cudal1 run directory")
    with CandidateDB(path) as db:
        yield db


def _stored_tasks(db: CandidateDB) -> dict[str, dict[str, Any]]:
    return dict(json.loads(db.get_meta("tasks") or "{}"))


def remember_tasks(db: CandidateDB, tasks: Sequence[Task]) -> None:
    """Record the run's tasks; a resumed run may add tasks but not change one under its name."""
    stored = _stored_tasks(db)
    for t in tasks:
        old = stored.get(t.name)
        if old is not None and Task(**old).hash != t.hash:
            raise OptimizeError(f"task {t.name!r} differs from the one this run started with")
        stored[t.name] = {
            "name": t.name,
            "source": t.source,
            "level": t.level,
            "path": t.path,
            "origin": t.origin,
        }
    db.set_meta("tasks", json.dumps(stored))


def _start_session(
    run_dir: Path,
    db: CandidateDB,
    tasks: Sequence[Task],
    config: OptimizeConfig,
    backend: LLMBackend | None,
    preflight: list[CallRecord],
    resume: bool,
) -> tuple[int, Budget]:
    """Record the session (tasks, config, model) and attach the run's ledger; returns its budget."""
    remember_tasks(db, tasks)
    (run_dir / CONFIG_FILE).write_text(dump_config(config), encoding="utf-8")
    run_id = db.start_run(dump_config(config), note="resume" if resume else "")
    db.set_meta("complete", "0")
    before = ledger_totals(run_dir / LEDGER_FILE)
    ledger = Ledger(run_dir / LEDGER_FILE)
    for record in preflight:
        ledger.record(record)
    if backend is not None:
        db.set_meta("llm", _describe(backend))
        backend.ledger = ledger
    log.info("run %d in %s: %d tasks, llm %s", run_id, run_dir, len(tasks), backend or "none")
    spent = sum(device_seconds(r.result) for t in tasks for r in db.evaluated(t.name) if r.result)
    return run_id, Budget(
        config.budget,
        ledger,
        tokens_before=before["prompt_tokens"] + before["completion_tokens"],
        cost_before=before["cost_usd"],
        gpu_seconds=spent,
    )


def _describe(backend: LLMBackend) -> str:
    """``prefix:model`` as a spec would name it (scripted models already carry their prefix)."""
    prefix = f"{backend.name}:"
    return backend.model if backend.model.startswith(prefix) else prefix + backend.model


def _expected(task: Task, config: OptimizeConfig, backend: LLMBackend | None) -> int:
    """Evaluations a task should see (for progress bars): seeds plus every LLM sample."""
    llm = config.rounds * config.samples if backend is not None else 0
    return len(seed_candidates(task, config.baseline_labels)) + llm


def _done(db: CandidateDB, task: Task) -> int:
    counts = db.counts(task.name)
    return counts.evaluated + counts.parse_failed


# -- the phases ------------------------------------------------------------------------------------


def _search(
    db: CandidateDB,
    tasks: Sequence[Task],
    config: OptimizeConfig,
    budget: Budget,
    backend: LLMBackend | None,
    progress: ProgressCallback | None,
    run_id: int,
) -> None:
    pool = make_pool(config.eval, config.pool)
    try:
        search = Search(db, pool, config, budget, backend=backend, progress=progress, run_id=run_id)
        asyncio.run(search.run(tasks))
    finally:
        pool.close()


def _final_record(db: CandidateDB, task: str) -> tuple[int, EvalResult] | None:
    raw = db.get_meta(f"final:{task}")
    if not raw:
        return None
    d = json.loads(raw)
    return int(d["candidate_id"]), EvalResult.from_dict(d["result"])


def _final_round(
    db: CandidateDB, tasks: Sequence[Task], config: OptimizeConfig, progress: ProgressCallback | None
) -> None:
    """Re-evaluate each task's best under the strict budget, unless that was already done."""
    if not config.final.enabled:
        return
    todo: dict[str, tuple[Task, CandidateRow]] = {}
    for task in tasks:
        best = choose_best(db.evaluated(task.name))
        done = _final_record(db, task.name)
        if best is not None and (done is None or done[0] != best.id):
            todo[str(best.id)] = (task, best)
        elif progress is not None and best is None:
            progress("final", final_event(task.name, None, None))
    if not todo:
        return
    cfg = config.final.apply(config.eval)
    with make_pool(cfg, config.pool, at_most=len(todo), spares=0) as pool:
        requests = [EvalRequest(task, row.source, request_id=key) for key, (task, row) in todo.items()]
        for request, result in pool.evaluate_many(requests):
            _, row = todo[request.request_id]
            with db.transaction():
                old = _final_record(db, row.task)
                if old is not None and old[0] != row.id:
                    db.set_final(old[0], False)
                db.set_final(row.id)
                db.set_meta(
                    f"final:{row.task}", json.dumps({"candidate_id": row.id, "result": result.to_dict()})
                )
            log.info(
                "%s final: %s %s",
                row.task,
                row.label,
                f"{result.speedup:.3f}x" if result.ok else result.error or "not ok",
            )
            if progress is not None:
                progress("final", final_event(row.task, row.label, result))


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip(".") or "task"


def _write_outputs(run_dir: Path, db: CandidateDB, config: OptimizeConfig) -> RunRecord:
    """``best/<task>.py``: the kept kernel, which is the reference unless ``TaskRecord.faster``."""
    best_dir = run_dir / BEST_DIR
    best_dir.mkdir(exist_ok=True)
    record = read_run(run_dir, db, config)
    stored = _stored_tasks(db)
    for t in record.tasks:
        if t.faster and t.best is not None:
            source = t.best.source
        else:
            source = reference_anchor(Task(**stored[t.name]))
            log.info("%s: no faster variant found; the exported kernel is the reference", t.name)
        (best_dir / f"{_safe_name(t.name)}.py").write_text(source, encoding="utf-8")
    return record


# -- reading a run back ----------------------------------------------------------------------------


def _task_record(db: CandidateDB, name: str, level: int) -> TaskRecord:
    evaluated = db.evaluated(name)
    best = choose_best(evaluated)
    final = _final_record(db, name)
    return TaskRecord(
        name=name,
        level=level,
        best=best,
        final=final[1] if best is not None and final is not None and final[0] == best.id else None,
        first_result=next((r.result for r in evaluated if r.result), None),
        counts=db.counts(name),
        rounds_done=db.rounds_done(name),
        baselines=tuple((r.label, r.result) for r in evaluated if r.round == 0 and r.result is not None),
    )


def read_run(run_dir: Path, db: CandidateDB, config: OptimizeConfig) -> RunRecord:
    """The run as it stands in its database, ledger and config."""
    stored = _stored_tasks(db)
    tasks = tuple(_task_record(db, name, int(task.get("level") or 0)) for name, task in stored.items())
    finals = [f[1] for name in stored if (f := _final_record(db, name)) is not None]
    gpu_seconds = sum(
        device_held_seconds(r.result) for name in stored for r in db.evaluated(name) if r.result
    )
    gpu_seconds += sum(device_held_seconds(r) for r in finals)
    return RunRecord(
        run_dir=Path(run_dir),
        config=config,
        llm=db.get_meta("llm") or config.llm.spec,
        ledger=ledger_totals(Path(run_dir) / LEDGER_FILE),
        gpu_seconds=gpu_seconds,
        wall_s=float(db.get_meta("wall_s") or 0.0),
        stop_reason=db.get_meta("stop_reason") or None,
        complete=db.get_meta("complete") == "1",
        tasks=tasks,
    )
