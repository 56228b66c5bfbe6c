"""SQLite files with append-only, named migrations: how every cudal1 database opens and evolves.

The candidate database (``run/database.py``) and the hacking-case database
(``audit/database.py``) are both one SQLite file that an older or newer cudal1 may have written.
Both open through here, so they share one policy (the habit of simonw/llm):

- a ``migrations`` table records, by name, every migration applied to the file and when;
- migrations are append-only: never edit or reorder one that has shipped, add a new one at the
  end. Each runs inside its own transaction, so a file is never left half-migrated;
- a file that records a migration this code does not know was written by a newer cudal1 (or is
  another kind of cudal1 database) and is refused instead of being silently misread;
- ``connect`` takes the write lock up front (``BEGIN IMMEDIATE``), uses a WAL journal so that
  readers never block the writer, and waits on a busy timeout instead of failing when another
  writer holds the file.

Standard library only: this module sits below everything that stores data.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 30_000

# The ledger's name and shape are part of every shipped file: databases written before this
# module existed (the candidate database kept the ledger itself) use the same table.
_LEDGER = "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"


class Migration(NamedTuple):
    """One step of a schema: applied once per file, recorded under ``name``."""

    name: str
    sql: str


def timestamp() -> str:
    """Now, in UTC, as ISO 8601 with milliseconds: how every stored time is written."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def connect(path: str | Path) -> sqlite3.Connection:
    """Open ``path`` for use by several threads and processes; rows come back as ``sqlite3.Row``.

    The connection may be shared between threads (its owner serialises access); several
    connections to one file queue on the busy timeout.
    """
    # isolation_level="IMMEDIATE": the implicit BEGIN before a write takes the write lock at once,
    # so two writers queue instead of deadlocking on a read-to-write upgrade.
    conn = sqlite3.connect(
        path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level="IMMEDIATE", check_same_thread=False
    )
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def applied_migrations(conn: sqlite3.Connection) -> set[str]:
    """Names of the migrations recorded in the file (creating the empty ledger if it has none)."""
    with conn:
        conn.execute(_LEDGER)
    return {r[0] for r in conn.execute("SELECT name FROM migrations")}


def migrate(conn: sqlite3.Connection, migrations: Sequence[Migration], *, where: str) -> list[str]:
    """Apply the migrations the file lacks, in order; return the names applied now.

    ``where`` names the file in messages. Raises RuntimeError if the file records a migration
    that ``migrations`` does not hold.
    """
    applied = applied_migrations(conn)
    unknown = applied - {m.name for m in migrations}
    if unknown:
        raise RuntimeError(f"{where}: written by a newer cudal1 (unknown migrations {sorted(unknown)})")
    done = []
    for name, sql in migrations:
        if name not in applied and _apply(conn, name, sql):
            log.info("applied migration %s to %s", name, where)
            done.append(name)
    return done


def _apply(conn: sqlite3.Connection, name: str, sql: str) -> bool:
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        # Another process may have applied it between our read and our lock.
        if conn.execute("SELECT 1 FROM migrations WHERE name = ?", (name,)).fetchone():
            return False
        for stmt in statements(sql):
            conn.execute(stmt)
        conn.execute("INSERT INTO migrations (name, applied_at) VALUES (?, ?)", (name, timestamp()))
    return True


def statements(script: str) -> Iterator[str]:
    """Split a migration script into statements (``executescript`` would commit mid-migration)."""
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            yield buf.strip()
            buf = ""
    if buf.strip():
        raise ValueError(f"incomplete SQL statement in migration: {buf.strip()[:80]!r}")
