"""Named migrations: applied once, never re-applied on reopen, old files recognised, newer refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from cudal1.run.database import CandidateDB
from cudal1.run.migrations import MIGRATIONS
from cudal1.storage import Migration, connect, migrate, statements

NOTES = (
    Migration("0001_notes", "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL);"),
    Migration("0002_notes_author", "ALTER TABLE notes ADD COLUMN author TEXT NOT NULL DEFAULT '';"),
)


def ledger(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM migrations ORDER BY name")]


def test_migration_applied_once_and_not_on_reopen(tmp_path: Path) -> None:
    path = tmp_path / "notes.sqlite"
    conn = connect(path)
    assert migrate(conn, NOTES[:1], where=str(path)) == ["0001_notes"]
    with conn:
        conn.execute("INSERT INTO notes (text) VALUES ('kept')")
    conn.close()
    for expected in (["0002_notes_author"], []):  # reopening applies only what is new, once
        conn = connect(path)
        applied = migrate(conn, NOTES, where=str(path))
        rows = [tuple(r) for r in conn.execute("SELECT text, author FROM notes")]
        conn.close()
        assert rows == [("kept", "")]
        assert applied == expected
    assert ledger(path) == ["0001_notes", "0002_notes_author"]


def test_failed_migration_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "notes.sqlite"
    broken = Migration("0001_broken", "CREATE TABLE a (x INTEGER);\nCREATE TABLE a (x INTEGER);\n")
    conn = connect(path)
    with pytest.raises(sqlite3.OperationalError):
        migrate(conn, [broken], where=str(path))
    assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'a'").fetchone() is None
    assert migrate(conn, NOTES[:1], where=str(path)) == ["0001_notes"]
    conn.close()


def test_unknown_migration_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.sqlite"
    conn = connect(path)
    migrate(conn, NOTES, where=str(path))
    with pytest.raises(RuntimeError, match="newer cudal1"):
        migrate(conn, NOTES[:1], where=str(path))
    conn.close()


def test_statements_split_and_refuse_a_truncated_script() -> None:
    assert list(statements("CREATE TABLE a (x);\n\nCREATE TABLE b (y);\n")) == [
        "CREATE TABLE a (x);",
        "CREATE TABLE b (y);",
    ]
    with pytest.raises(ValueError, match="incomplete"):
        list(statements("CREATE TABLE a (x"))


def test_candidate_database_made_before_the_shared_module_still_opens(tmp_path: Path) -> None:
    """What ``CandidateDB`` wrote when it kept its own ledger: the same table, rows and names."""
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
        )
        for stmt in statements(MIGRATIONS[0].sql):
            conn.execute(stmt)
        conn.execute(
            "INSERT INTO migrations VALUES (?, ?)", (MIGRATIONS[0].name, "2026-11-01T00:00:00.000+00:00")
        )
        conn.execute(
            "INSERT INTO candidates (task, task_hash, source, source_hash, created_at, status)"
            " VALUES ('gemm_relu', 'h', 'class ModelNew: pass', 's', '2026-11-01', 'pending')"
        )
    conn.close()
    with CandidateDB(path) as db:
        assert [row.source for row in db.pending()] == ["class ModelNew: pass"]
    with sqlite3.connect(path) as conn:
        stamps = dict(conn.execute("SELECT name, applied_at FROM migrations"))
    conn.close()
    assert stamps[MIGRATIONS[0].name] == "2026-11-01T00:00:00.000+00:00"  # recognised, not re-applied
    assert set(stamps) == {m.name for m in MIGRATIONS}  # the later ones applied on top
