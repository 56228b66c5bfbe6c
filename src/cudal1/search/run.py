"""One optimisation run = one directory; ``optimize`` drives the loop in it and reports what it found.

The run directory holds ``config.yaml`` (the resolved config), ``candidates.db`` (the state:
every candidate, result, finished round, and the final re-evaluations), ``run.log``,
``llm-calls.jsonl`` (one line per LLM call), ``best/<task>.py`` and ``summary.json``.
Everything a resumed session or ``cudal1 runs show`` needs is read back from those files, so a
killed run loses nothing that was already evaluated.

After the search, each task's best candidate (``loop.choose_best``) is evaluated again under
the strict ``final`` budget, outside any search budget (one evaluation per task); the reported
numbers are that evaluation's, and the candidate is marked ``final`` in the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudal1.config import dump_config, load_config
from cudal1.eval.pool import EvalPool
from cudal1.llm import CallRecord, Ledger, LLMBackend, Message, SamplingParams, create_backend
from cudal1.schema import EvalRequest, EvalResult, Task
from cudal1.search.database import CandidateDB, CandidateRow
from cudal1.search.loop import (
    Budget,
    OptimizeConfig,
    ProgressCallback,
    Search,
    choose_best,
    device_seconds,
    seed_candidates,
)

log = logging.getLogger(__name__)

CONFIG_FILE, DB_FILE, LOG_FILE = "config.yaml", "candidates.db", "run.log"
LEDGER_FILE, BEST_DIR, SUMMARY_FILE = "llm-calls.jsonl", "best", "summary.json"


class OptimizeError(Exception):
    """A run that cannot start as asked (bad run directory, LLM spec or task set); nothing was run."""


@dataclass(frozen=True)
class TaskSummary:
    """A task's outcome; speedup, interval and times come from the final re-evaluation when ``final``."""

    task: str
    level: int
    best_id: int | None
    best_label: str | None
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    correct: bool
    ref_ms: float | None
    cand_ms: float | None
    final: bool
    search_speedup: float | None
    evaluated: int
    correct_count: int
    parse_failed: int
    pending: int
    rounds_done: int


@dataclass(frozen=True)
class RunSummary:
    run_dir: str
    llm: str | None
    rounds: int
    samples: int
    device: str | None
    gpu: str | None
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    gpu_seconds: float
    wall_s: float
    stop_reason: str | None
    complete: bool
    tasks: tuple[TaskSummary, ...]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSummary:
        return cls(**{**d, "tasks": tuple(TaskSummary(**t) for t in d["tasks"])})


# -- public entry points ---------------------------------------------------------------------------


def optimize(
    tasks: Sequence[Task],
    run_dir: Path,
    config: OptimizeConfig,
    *,
    resume: bool = False,
    backend: LLMBackend | None = None,
    progress: ProgressCallback | None = None,
) -> RunSummary:
    """Search faster variants of ``tasks`` in ``run_dir`` and re-evaluate each task's best.

    ``backend`` overrides ``config.llm.spec`` (tests inject one); its calls are then recorded in
    the run's ledger. Raises OptimizeError before doing anything when the run cannot start, and
    ``LLMError`` when the endpoint fails (the preflight call, or later: everything stored stays).
    """
    run_dir = Path(run_dir)
    _check_start(tasks, run_dir, resume)
    backend = backend if backend is not None else _make_backend(config.llm.spec, config.llm.options)
    preflight = _preflight(backend) if backend is not None and config.llm.preflight else []
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with _run_log(run_dir / LOG_FILE), CandidateDB(run_dir / DB_FILE) as db:
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
        summary = _write_outputs(run_dir, db, config)
    if progress is not None:
        progress("run_done", {"summary": summary.to_dict()})
    return summary


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


def load_run_summary(run_dir: Path) -> RunSummary:
    """The run's summary, built from its database (so a running or killed run shows its progress)."""
    run_dir = Path(run_dir)
    config = load_run_config(run_dir)
    with _open_db(run_dir) as db:
        return build_summary(run_dir, db, config)


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


def _check_start(tasks: Sequence[Task], run_dir: Path, resume: bool) -> None:
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
def _run_log(path: Path) -> Iterator[None]:
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


def _remember_tasks(db: CandidateDB, tasks: Sequence[Task]) -> None:
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
    _remember_tasks(db, tasks)
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
    pool = EvalPool(
        config.eval, workers=config.pool.workers, spares=config.pool.spares, devices=config.pool.devices
    )
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
    if not todo:
        return
    cfg = config.final.apply(config.eval)
    workers = min(config.pool.workers, len(todo))
    with EvalPool(cfg, workers=workers, spares=0, devices=config.pool.devices) as pool:
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
                progress(
                    "final",
                    {"task": row.task, "label": row.label, "ok": result.ok, "speedup": result.speedup},
                )


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip(".") or "task"


def _write_outputs(run_dir: Path, db: CandidateDB, config: OptimizeConfig) -> RunSummary:
    best_dir = run_dir / BEST_DIR
    best_dir.mkdir(exist_ok=True)
    summary = build_summary(run_dir, db, config)
    for t in summary.tasks:
        if t.best_id is not None:
            (best_dir / f"{_safe_name(t.task)}.py").write_text(db.get(t.best_id).source, encoding="utf-8")
    (run_dir / SUMMARY_FILE).write_text(json.dumps(summary.to_dict(), indent=2) + "\n", encoding="utf-8")
    return summary


# -- summary ---------------------------------------------------------------------------------------


def _task_summary(db: CandidateDB, name: str, level: int) -> tuple[TaskSummary, EvalResult | None]:
    best = choose_best(db.evaluated(name))
    final = _final_record(db, name)
    is_final = best is not None and final is not None and final[0] == best.id
    result = final[1] if is_final and final else (best.result if best else None)
    timing = result.timing if result is not None and result.ok else None
    counts = db.counts(name)
    summary = TaskSummary(
        task=name,
        level=level,
        best_id=best.id if best else None,
        best_label=best.label if best else None,
        speedup=result.speedup if result else None,
        ci_low=timing.ci_low if timing else None,
        ci_high=timing.ci_high if timing else None,
        correct=bool(result and result.correct),
        ref_ms=timing.ref_median_ms if timing else None,
        cand_ms=timing.cand_median_ms if timing else None,
        final=is_final,
        search_speedup=best.speedup if best else None,
        evaluated=counts.evaluated,
        correct_count=counts.correct,
        parse_failed=counts.parse_failed,
        pending=counts.pending,
        rounds_done=db.rounds_done(name),
    )
    return summary, result or next((r.result for r in db.evaluated(name) if r.result), None)


def build_summary(run_dir: Path, db: CandidateDB, config: OptimizeConfig) -> RunSummary:
    """The run as it stands in its database, ledger and config."""
    stored = _stored_tasks(db)
    rows, results = [], []
    for name, task in stored.items():
        summary, result = _task_summary(db, name, int(task.get("level") or 0))
        rows.append(summary)
        if result is not None:
            results.append(result)
    ledger = ledger_totals(Path(run_dir) / LEDGER_FILE)
    gpu_seconds = sum(device_seconds(r.result) for name in stored for r in db.evaluated(name) if r.result)
    env = next((r for r in results if r.environment.get("gpu")), results[0] if results else None)
    return RunSummary(
        run_dir=str(run_dir),
        llm=db.get_meta("llm") or config.llm.spec,
        rounds=config.rounds,
        samples=config.samples,
        device=env.device if env else None,
        gpu=env.environment.get("gpu") if env else None,
        llm_calls=ledger["calls"],
        prompt_tokens=ledger["prompt_tokens"],
        completion_tokens=ledger["completion_tokens"],
        cost_usd=ledger["cost_usd"],
        gpu_seconds=gpu_seconds,
        wall_s=float(db.get_meta("wall_s") or 0.0),
        stop_reason=db.get_meta("stop_reason") or None,
        complete=db.get_meta("complete") == "1",
        tasks=tuple(rows),
    )
