"""Candidate database: every variant a run proposes, with its evaluation, in one SQLite file.

The database is the search's memory. It is what makes a run resumable (a killed run reopens the
file, evaluates what was stored but not yet evaluated, and goes on), what feeds exemplars into
contrastive prompts, and what training and reports read afterwards. Hence:

- one file in the run directory, standard-library ``sqlite3``, WAL journal so that readers
  (reports, a second process) never block the writer, and a busy timeout so that concurrent
  writers wait instead of failing;
- every write is one transaction (``BEGIN IMMEDIATE``: the write lock is taken up front, so two
  writers queue on the busy timeout instead of deadlocking on a read-to-write upgrade);
  ``transaction()`` groups several writes (a round's samples) into one;
- append-only, named migrations (``run.migrations``, applied by ``cudal1.storage`` as the
  hacking-case database's are): a ``migrations`` table records what was applied, each migration
  runs inside its own transaction, and a file written by a newer cudal1 is refused instead of
  silently misread; the rows read back are the types of ``run.rows``;
- the same source is never evaluated twice for a task: a partial unique index on
  ``(task, source_hash)`` enforces what ``find_by_hash`` lets the loop check cheaply.

Results are stored as ``EvalResult.to_dict()`` JSON; the effective speedup (None unless the
result is correct, timed and not rejected) and correctness are copied into columns for queries.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from cudal1.run.migrations import MIGRATIONS
from cudal1.run.rows import CandidateRow, CandidateStatus, Provenance, Review, RewardAudit, TaskCounts
from cudal1.schema import EvalResult, Task, source_hash
from cudal1.storage import connect, migrate, timestamp

log = logging.getLogger(__name__)


class DuplicateSourceError(ValueError):
    """The task already has a candidate with this exact source; ``existing_id`` names it."""

    def __init__(self, task: str, existing_id: int) -> None:
        super().__init__(f"task {task!r} already has this source as candidate {existing_id}")
        self.existing_id = existing_id


class CandidateDB:
    """The run's candidate database. An instance may be shared between threads, and several
    instances (threads, processes) may open the same file: writers queue on the busy timeout."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = connect(self.path)
        self._lock = threading.RLock()
        self._depth = 0
        migrate(self._conn, MIGRATIONS, where=str(self.path))

    # -- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> CandidateDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One transaction for every write inside the block; nested blocks join the outer one.

        Either all of the block's writes are committed or, if it raises, none of them.
        """
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self._conn
                finally:
                    self._depth -= 1
                return
            self._depth = 1
            try:
                with self._conn:
                    self._conn.execute("BEGIN IMMEDIATE")
                    yield self._conn
            finally:
                self._depth = 0

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[CandidateRow]:
        with self._lock:
            rows = self._conn.execute(sql, params).fetchall()
        return [CandidateRow.from_sqlite(r) for r in rows]

    # -- runs and meta ---------------------------------------------------------------------------

    def start_run(self, config: str = "", note: str = "") -> int:
        """Record a run (or a resumption) with its resolved config; returns its id."""
        with self.transaction() as conn:
            cur = conn.execute(
                "INSERT INTO runs (started_at, config, note) VALUES (?, ?, ?)", (timestamp(), config, note)
            )
        return int(cur.lastrowid or 0)

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    # -- reward audits ---------------------------------------------------------------------------

    def record_audit(self, audit: RewardAudit) -> None:
        """Store a candidate's audit, replacing an earlier one (a re-audit by a judge)."""
        with self.transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO reward_audits (candidate_id, task, reasons, verdict, judge_reason,"
                " reward, action, audited_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (audit.candidate_id, audit.task, json.dumps(list(audit.reasons)), audit.verdict,
                 audit.judge_reason, audit.reward, audit.action, timestamp()),
            )  # fmt: skip

    def review_audit(self, cand_id: int, review: Review) -> None:
        """Record a person's review of a candidate's audit."""
        with self.transaction() as conn:
            cur = conn.execute(
                "UPDATE reward_audits SET review = ?, reviewed_at = ? WHERE candidate_id = ?",
                (review, timestamp(), cand_id),
            )
            if cur.rowcount != 1:
                raise KeyError(f"candidate {cand_id} has no audit")

    def audits(self, cand_id: int | None = None) -> list[RewardAudit]:
        """Every audit of the run (or ``cand_id``'s), by candidate id."""
        where, params = ("WHERE candidate_id = ?", (cand_id,)) if cand_id is not None else ("", ())
        with self._lock:
            rows = self._conn.execute(
                f"SELECT * FROM reward_audits {where} ORDER BY candidate_id", params
            ).fetchall()
        return [RewardAudit.from_sqlite(r) for r in rows]

    def withheld(self) -> set[int]:
        """Candidates whose reward an audit did not let count in full (held, zeroed, rejected,
        confirmed as a hack): no exemplar, no training row."""
        return {a.candidate_id for a in self.audits() if not a.counts_in_full}

    # -- writes ----------------------------------------------------------------------------------

    def add_candidate(
        self,
        task: Task,
        source: str,
        provenance: Provenance | None = None,
        *,
        label: str = "",
        analysis: str = "",
    ) -> int:
        """Store a parsed candidate as pending; raises DuplicateSourceError if the task has it."""
        try:
            return self._insert(
                task, source, CandidateStatus.PENDING, provenance, label=label, analysis=analysis
            )
        except sqlite3.IntegrityError:
            existing = self.find_by_hash(task.name, source_hash(source))
            if existing is None:
                raise
            raise DuplicateSourceError(task.name, existing.id) from None

    def record_parse_failure(
        self, task: Task, reply: str, error: str, provenance: Provenance | None = None, *, analysis: str = ""
    ) -> int:
        """Store a reply that yielded no usable code; ``source`` keeps the whole reply for audit."""
        return self._insert(
            task, reply, CandidateStatus.PARSE_FAILED, provenance, analysis=analysis, parse_error=error
        )

    def _insert(
        self, task: Task, source: str, status: CandidateStatus, provenance: Provenance | None, **extra: str
    ) -> int:
        prov = dataclasses.asdict(provenance or Provenance())
        prov["parent_ids"] = json.dumps(list(prov["parent_ids"]))
        columns: dict[str, Any] = {
            "task": task.name,
            "task_hash": task.hash,
            "source": source,
            "source_hash": source_hash(source),
            "created_at": timestamp(),
            "status": status.value,
            **prov,
            **extra,
        }
        sql = f"INSERT INTO candidates ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
        with self.transaction() as conn:
            cur = conn.execute(sql, tuple(columns.values()))
        return int(cur.lastrowid or 0)

    def record_result(self, cand_id: int, result: EvalResult) -> None:
        """Attach an evaluation to a pending candidate; it then counts for best() and exemplars."""
        with self.transaction() as conn:
            row = conn.execute(
                "SELECT task, source_hash, status FROM candidates WHERE id = ?", (cand_id,)
            ).fetchone()
            if row is None:
                raise KeyError(f"no candidate {cand_id}")
            if row["status"] != CandidateStatus.PENDING.value:
                raise ValueError(f"candidate {cand_id} is {row['status']}, not pending")
            if result.task != row["task"] or (
                result.candidate_hash and result.candidate_hash != row["source_hash"]
            ):
                raise ValueError(
                    f"result for {result.task}/{result.candidate_hash[:12]} does not match candidate {cand_id}"
                )
            conn.execute(
                "UPDATE candidates SET status = 'evaluated', result = ?, speedup = ?, correct = ?,"
                " evaluated_at = ? WHERE id = ?",
                (json.dumps(result.to_dict()), result.speedup, int(result.correct), timestamp(), cand_id),
            )

    def set_final(self, cand_id: int, final: bool = True) -> None:
        """Mark a candidate as the task's reported answer (what ``final`` evaluation and reports use)."""
        with self.transaction() as conn:
            cur = conn.execute("UPDATE candidates SET final = ? WHERE id = ?", (int(final), cand_id))
            if cur.rowcount != 1:
                raise KeyError(f"no candidate {cand_id}")

    def finish_round(self, task: str, round: int) -> None:
        """Mark a round complete; refuses while any of its candidates is still pending."""
        with self.transaction() as conn:
            n = conn.execute(
                "SELECT COUNT(*) FROM candidates WHERE task = ? AND round = ? AND status = 'pending'",
                (task, round),
            ).fetchone()[0]
            if n:
                raise ValueError(f"round {round} of {task!r} still has {n} pending candidates")
            conn.execute(
                "INSERT OR REPLACE INTO rounds (task, round, finished_at) VALUES (?, ?, ?)",
                (task, round, timestamp()),
            )

    # -- reads -----------------------------------------------------------------------------------

    def get(self, cand_id: int) -> CandidateRow:
        rows = self._query("SELECT * FROM candidates WHERE id = ?", (cand_id,))
        if not rows:
            raise KeyError(f"no candidate {cand_id}")
        return rows[0]

    def pending(self, task: str | None = None) -> list[CandidateRow]:
        """Candidates stored but not yet evaluated, oldest first: what a resumed run evaluates first."""
        if task is None:
            return self._query("SELECT * FROM candidates WHERE status = 'pending' ORDER BY id")
        return self._query(
            "SELECT * FROM candidates WHERE status = 'pending' AND task = ? ORDER BY id", (task,)
        )

    def evaluated(self, task: str) -> list[CandidateRow]:
        return self._query(
            "SELECT * FROM candidates WHERE task = ? AND status = 'evaluated' ORDER BY id", (task,)
        )

    def best(self, task: str) -> CandidateRow | None:
        """The fastest correct, accepted candidate of a task (earliest wins a tie), or None."""
        rows = self._query(
            "SELECT * FROM candidates WHERE task = ? AND speedup IS NOT NULL AND correct = 1"
            " ORDER BY speedup DESC, id LIMIT 1",
            (task,),
        )
        return rows[0] if rows else None

    def best_per_task(self) -> dict[str, CandidateRow]:
        rows = self._query(
            "SELECT * FROM candidates c WHERE c.id = (SELECT id FROM candidates WHERE task = c.task"
            " AND speedup IS NOT NULL AND correct = 1 ORDER BY speedup DESC, id LIMIT 1) ORDER BY task"
        )
        return {r.task: r for r in rows}

    def find_by_hash(self, task: str, source_hash: str) -> CandidateRow | None:
        """The task's candidate with this source (parse failures excluded), if any."""
        rows = self._query(
            "SELECT * FROM candidates WHERE task = ? AND source_hash = ? AND status != 'parse_failed'",
            (task, source_hash),
        )
        return rows[0] if rows else None

    def counts(self, task: str) -> TaskCounts:
        with self._lock:
            row = self._conn.execute(
                "SELECT COUNT(*), SUM(status = 'pending'), SUM(status = 'evaluated'), SUM(status = 'parse_failed'),"
                " SUM(correct = 1), SUM(speedup IS NOT NULL), SUM(speedup > 1.01) FROM candidates WHERE task = ?",
                (task,),
            ).fetchone()
        return TaskCounts(*(int(v or 0) for v in row))

    def rounds_done(self, task: str) -> int:
        """Rounds finished without a gap from round 0: the round a resumed loop starts with."""
        with self._lock:
            done = {r[0] for r in self._conn.execute("SELECT round FROM rounds WHERE task = ?", (task,))}
        n = 0
        while n in done:
            n += 1
        return n

    def tasks_in_round(self, round: int) -> set[str]:
        """Tasks with any row stored in ``round``, parse failures included: the tasks a resumed
        round has already sampled."""
        with self._lock:
            rows = self._conn.execute("SELECT DISTINCT task FROM candidates WHERE round = ?", (round,))
            return {r[0] for r in rows}
