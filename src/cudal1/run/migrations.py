"""The candidate database's schema: its append-only, named migrations (``cudal1.storage`` applies
them when ``run.database.CandidateDB`` opens a file).

Every shipped file records by name which of these it has, so the list only grows. The rows the
tables hold are read back as the types of ``run.rows``; the queries live in ``run.database``.
"""

from __future__ import annotations

from cudal1.storage import Migration

# Append-only: never edit or reorder an applied migration; add a new one at the end.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        "0001_candidates_runs_meta",
        """
        CREATE TABLE runs (
            id INTEGER PRIMARY KEY,
            started_at TEXT NOT NULL,
            config TEXT NOT NULL DEFAULT '',
            note TEXT NOT NULL DEFAULT ''
        );
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE candidates (
            id INTEGER PRIMARY KEY,
            run_id INTEGER REFERENCES runs(id),
            task TEXT NOT NULL,
            task_hash TEXT NOT NULL,
            label TEXT NOT NULL DEFAULT '',
            source TEXT NOT NULL,
            source_hash TEXT NOT NULL,
            parent_ids TEXT NOT NULL DEFAULT '[]',
            prompt_hash TEXT,
            backend TEXT NOT NULL DEFAULT '',
            model TEXT NOT NULL DEFAULT '',
            round INTEGER NOT NULL DEFAULT 0,
            prompt_tokens INTEGER,
            completion_tokens INTEGER,
            created_at TEXT NOT NULL,
            evaluated_at TEXT,
            status TEXT NOT NULL CHECK (status IN ('pending', 'evaluated', 'parse_failed')),
            result TEXT,
            speedup REAL,
            correct INTEGER,
            analysis TEXT NOT NULL DEFAULT '',
            parse_error TEXT,
            final INTEGER NOT NULL DEFAULT 0
        );
        CREATE UNIQUE INDEX candidates_task_source
            ON candidates(task, source_hash) WHERE status != 'parse_failed';
        CREATE INDEX candidates_task_status ON candidates(task, status);
        CREATE INDEX candidates_task_speedup ON candidates(task, speedup);
        CREATE TABLE rounds (
            task TEXT NOT NULL,
            round INTEGER NOT NULL,
            finished_at TEXT NOT NULL,
            PRIMARY KEY (task, round)
        );
        """,
    ),
    # Training (cudal1 train grpo/selfsup) records the optimizer step that produced a candidate.
    Migration("0002_candidates_training_step", "ALTER TABLE candidates ADD COLUMN step INTEGER;"),
    # Seeds and compositions (issue 20): where a candidate came from beyond a model's reply, the
    # candidate a built-in transform was applied to, and the speedup its source claimed.
    Migration(
        "0003_candidates_origin",
        """
        ALTER TABLE candidates ADD COLUMN origin TEXT NOT NULL DEFAULT '';
        ALTER TABLE candidates ADD COLUMN base_id INTEGER REFERENCES candidates(id);
        ALTER TABLE candidates ADD COLUMN claimed_speedup REAL;
        """,
    ),
    # Issue 23: every audit of a suspicious reward (train/auditing.py), and a person's review of a
    # held one (cudal1 audit): the held list outlives the session that held them.
    Migration(
        "0004_reward_audits",
        """
        CREATE TABLE reward_audits (
            candidate_id INTEGER PRIMARY KEY REFERENCES candidates(id),
            task TEXT NOT NULL,
            reasons TEXT NOT NULL,
            verdict TEXT NOT NULL CHECK (verdict IN ('hack', 'legit', 'unsure', 'unaudited')),
            judge_reason TEXT NOT NULL DEFAULT '',
            reward REAL NOT NULL,
            action TEXT NOT NULL CHECK (action IN ('keep', 'zero', 'reject', 'hold')),
            audited_at TEXT NOT NULL,
            review TEXT CHECK (review IN ('confirmed', 'cleared')),
            reviewed_at TEXT
        );
        """,
    ),
)
