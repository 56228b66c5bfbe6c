"""The run directory: the one type that creates, opens and resumes a run, whatever command made it.

A run directory holds ``config.yaml`` (the resolved config of its latest session),
``candidates.db`` (the state: every candidate, result, finished round, the run's tasks and the
final re-evaluations), ``run.log``, ``llm-calls.jsonl`` (one line per LLM call),
``best/<task>.py`` and ``summary.json`` (what ``optimize`` writes when it finishes). ``optimize``,
``collect`` and the training stages write runs through ``RunDirectory``; ``runs show``,
``report`` and ``dataset export`` read them through it (``records.py`` reads a run back).

Everything a resumed session needs is in those files, so a killed run loses nothing that was
already stored: a session first checks that it may start here (``check_start``), then opens the
directory's database and log together (``session``).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from cudal1.config import dump_config, load_config
from cudal1.llm import Ledger, ledger_totals
from cudal1.run.database import CandidateDB
from cudal1.run.rows import CandidateRow
from cudal1.run.runlog import run_log
from cudal1.schema import EvalResult, Task

CONFIG_FILE, DB_FILE, LOG_FILE = "config.yaml", "candidates.db", "run.log"
LEDGER_FILE, BEST_DIR, SUMMARY_FILE = "llm-calls.jsonl", "best", "summary.json"

C = TypeVar("C", bound=BaseModel)


class RunError(Exception):
    """A run directory that cannot be opened, started or written as asked."""


class RunDirectory:
    """One run's directory and the files in it."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDirectory({str(self.path)!r})"

    @property
    def config_file(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def db_file(self) -> Path:
        return self.path / DB_FILE

    @property
    def log_file(self) -> Path:
        return self.path / LOG_FILE

    @property
    def ledger_file(self) -> Path:
        return self.path / LEDGER_FILE

    @property
    def best_dir(self) -> Path:
        return self.path / BEST_DIR

    @property
    def summary_file(self) -> Path:
        return self.path / SUMMARY_FILE

    # -- starting and opening ----------------------------------------------------------------------

    def check_start(self, tasks: Sequence[Task], *, resume: bool) -> None:
        """Raise RunError unless a session over ``tasks`` may start here: a new or empty
        directory, or with ``resume`` one that already holds a run."""
        if not tasks:
            raise RunError("no tasks to optimise")
        names = [t.name for t in tasks]
        if len(set(names)) != len(names):
            raise RunError(f"task names must be unique: {sorted({n for n in names if names.count(n) > 1})}")
        if self.path.exists() and not self.path.is_dir():
            raise RunError(f"{self.path} is not a directory")
        if not (self.path.is_dir() and any(self.path.iterdir())):
            return
        if not resume:
            raise RunError(
                f"{self.path} exists and is not empty: pass --resume to continue that run, or choose another --out"
            )
        if not self.db_file.is_file():
            raise RunError(
                f"{self.path} is not a cudal1 run directory (no {DB_FILE}); refusing to write there"
            )

    @contextlib.contextmanager
    def session(self) -> Iterator[CandidateDB]:
        """The directory (created if missing) with its log and its database open, for a session
        that writes the run; RunError when either cannot be opened for writing."""
        with contextlib.ExitStack() as stack:
            stack.enter_context(self.logging())
            with self._writing(f"open {DB_FILE}"):
                db = stack.enter_context(CandidateDB(self.db_file))
            yield db

    @contextlib.contextmanager
    def logging(self, name: str = LOG_FILE) -> Iterator[None]:
        """``cudal1`` records at INFO and above go to the run's log (or the log ``name``: another
        process of a multi-process launch writes its own) while the context lasts; RunError when
        the directory or the log cannot be created."""
        with contextlib.ExitStack() as stack:
            with self._writing(f"write {name}"):
                self.path.mkdir(parents=True, exist_ok=True)
                stack.enter_context(run_log(self.path / name))
            yield

    @contextlib.contextmanager
    def _writing(self, what: str) -> Iterator[None]:
        """An OS or SQLite error while setting up the run's files, as a RunError that says where
        and what (a read-only or mistyped --out is bad input, not a traceback). Only set-up runs
        inside: errors of the session's own work keep their type."""
        try:
            yield
        except (OSError, sqlite3.Error) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise RunError(f"{self.path}: cannot {what}: {reason}") from exc

    @contextlib.contextmanager
    def open_db(self) -> Iterator[CandidateDB]:
        """The database of an existing run, for reading it (RunError when there is none)."""
        if not self.db_file.is_file():
            raise RunError(f"{self.path}: no {DB_FILE}; not a cudal1 run directory")
        with CandidateDB(self.db_file) as db:
            yield db

    # -- config, tasks, ledger ---------------------------------------------------------------------

    def write_config(self, config: BaseModel) -> None:
        with self._writing(f"write {CONFIG_FILE}"):
            self.path.mkdir(parents=True, exist_ok=True)
            self.config_file.write_text(dump_config(config), encoding="utf-8")

    def read_config(self, model: type[C]) -> C:
        if not self.config_file.is_file():
            raise RunError(f"{self.path}: no {CONFIG_FILE}; not a cudal1 run directory")
        return load_config(model, self.config_file)

    def load_tasks(self) -> list[Task]:
        """The tasks the run was started with (what a resumed run searches when none are named)."""
        with self.open_db() as db:
            return list(stored_tasks(db).values())

    def ledger(self) -> Ledger:
        """A ledger that appends this session's LLM calls to the run's file."""
        return Ledger(self.ledger_file)

    def ledger_totals(self) -> dict[str, float]:
        """Calls, tokens and cost of every session of the run so far."""
        return ledger_totals(self.ledger_file)


def start_session(
    db: CandidateDB, run: RunDirectory, tasks: Sequence[Task], config: BaseModel, note: str
) -> int:
    """Record a session: the tasks (a resumed run may add some), the config it runs with, and a
    row in the run's sessions; returns the session's id."""
    remember_tasks(db, tasks)
    run.write_config(config)
    return db.start_run(dump_config(config), note=note)


def add_wall_time(db: CandidateDB, seconds: float) -> None:
    """Add a session's wall time to the run's total (every session, killed ones included)."""
    db.set_meta("wall_s", f"{float(db.get_meta('wall_s') or 0) + seconds:.3f}")


def stored_tasks(db: CandidateDB) -> dict[str, Task]:
    """The run's tasks by name, as the run recorded them."""
    return {name: Task(**d) for name, d in json.loads(db.get_meta("tasks") or "{}").items()}


def remember_tasks(db: CandidateDB, tasks: Sequence[Task]) -> None:
    """Record the run's tasks; a resumed run may add tasks but not change one under its name."""
    stored = json.loads(db.get_meta("tasks") or "{}")
    for t in tasks:
        old = stored.get(t.name)
        if old is not None and Task(**old).hash != t.hash:
            raise RunError(f"task {t.name!r} differs from the one this run started with")
        stored[t.name] = {
            "name": t.name,
            "source": t.source,
            "level": t.level,
            "path": t.path,
            "origin": t.origin,
        }
    db.set_meta("tasks", json.dumps(stored))


def final_record(db: CandidateDB, task: str) -> tuple[int, EvalResult] | None:
    """The task's final re-evaluation: the candidate it re-measured, and the result."""
    raw = db.get_meta(f"final:{task}")
    if not raw:
        return None
    d = json.loads(raw)
    return int(d["candidate_id"]), EvalResult.from_dict(d["result"])


def passed_finals(db: CandidateDB, task: str) -> dict[int, EvalResult]:
    """Every final re-evaluation of the task's candidates that passed, by id: the kept one's and
    those of the candidates it was re-measured against (``selection.choose_kept`` ranks a
    candidate by its final when it has one). A run from before these were kept has its one
    final only."""
    raw = db.get_meta(f"finals:{task}")
    out = {int(k): EvalResult.from_dict(v) for k, v in json.loads(raw).items()} if raw else {}
    kept = final_record(db, task)
    if kept is not None:
        out.setdefault(kept[0], kept[1])
    return out


def failed_finals(db: CandidateDB, task: str) -> dict[int, EvalResult]:
    """The task's candidates that failed their final re-evaluation (incorrect, rejected, not
    timed in a fresh build), by id, with that result: never kept (``selection.choose_kept``)."""
    raw = db.get_meta(f"final_failed:{task}")
    return {int(k): EvalResult.from_dict(v) for k, v in json.loads(raw).items()} if raw else {}


def every_final(db: CandidateDB, task: str) -> dict[int, EvalResult]:
    """Every final re-evaluation of the task's candidates, passed or failed, by id: what stands for
    a candidate's search measurement where it has one (a candidate has one final at most)."""
    return {**passed_finals(db, task), **failed_finals(db, task)}


def record_failed_final(db: CandidateDB, row: CandidateRow, result: EvalResult) -> None:
    """``row`` failed its final re-evaluation: its task keeps another candidate."""
    with db.transaction():
        failed = {str(k): v.to_dict() for k, v in failed_finals(db, row.task).items()}
        failed[str(row.id)] = result.to_dict()
        db.set_meta(f"final_failed:{row.task}", json.dumps(failed))
        old = final_record(db, row.task)
        if old is not None and old[0] == row.id:
            db.set_final(row.id, False)
            db.set_meta(f"final:{row.task}", "")


def record_final(db: CandidateDB, row: CandidateRow, result: EvalResult) -> None:
    """Make ``result`` the final re-evaluation of ``row``'s task (an earlier one is unmarked, and
    stays among ``passed_finals``)."""
    with db.transaction():
        passed = {str(k): v.to_dict() for k, v in passed_finals(db, row.task).items()}
        passed[str(row.id)] = result.to_dict()
        db.set_meta(f"finals:{row.task}", json.dumps(passed))
        old = final_record(db, row.task)
        if old is not None and old[0] != row.id:
            db.set_final(old[0], False)
        db.set_final(row.id)
        db.set_meta(f"final:{row.task}", json.dumps({"candidate_id": row.id, "result": result.to_dict()}))
