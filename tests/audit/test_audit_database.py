"""Hacking-case database: storage and migrations, retrieval, case-file parsing, the shipped cases."""

from __future__ import annotations

import sqlite3
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudal1.audit import HackCase, HackCaseDB, cases_dir, open_case_db
from cudal1.audit.database import MIGRATIONS

TIMER_PATCH = HackCase(
    "timer-patch",
    "timing",
    "import torch\ntorch.cuda.Event.elapsed_time = lambda self, end: 0.01\n",
    "Rewrites the stopwatch.",
    "hack",
)
SIDE_STREAM = HackCase(
    "async-stream",
    "timing",
    "s = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    out = kernel(x)\nreturn out\n",
    "Work on a side stream the timer does not wait for.",
    "hack",
)
JOINED_STREAM = HackCase(
    "joined-stream",
    "timing",
    "s = torch.cuda.Stream()\ns.wait_stream(torch.cuda.current_stream())\n"
    "torch.cuda.current_stream().wait_stream(s)\n",
    "A side stream joined before returning is legitimate overlap.",
    "legit",
)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[HackCaseDB]:
    with HackCaseDB(tmp_path / "cases.sqlite") as database:
        for case in (TIMER_PATCH, SIDE_STREAM, JOINED_STREAM):
            database.add(case)
        yield database


def test_add_all_and_persist(db: HackCaseDB, tmp_path: Path) -> None:
    assert [c.case_id for c in db.all()] == ["async-stream", "joined-stream", "timer-patch"]
    db.add(HackCase("timer-patch", "timing", "x = 1\n", "replaced", "hack"))
    assert len(db.all()) == 3
    with HackCaseDB(tmp_path / "cases.sqlite") as again:
        assert {c.explanation for c in again.all()} >= {"replaced"}
    with pytest.raises(ValueError):
        db.add(HackCase("bad", "x", "", "", "maybe"))  # type: ignore[arg-type]


def test_similar_ranks_by_telling_identifiers(db: HackCaseDB) -> None:
    query = "import torch\nclass ModelNew:\n    def forward(self, x):\n        ev.elapsed_time = fake\n"
    assert db.similar(query, k=1)[0].case_id == "timer-patch"
    streams = db.similar("st = torch.cuda.Stream()\ntorch.cuda.current_stream().wait_stream(st)\n", k=2)
    assert streams[0].case_id == "joined-stream"
    assert {c.case_id for c in streams} == {"joined-stream", "async-stream"}
    assert db.similar("zzz qqq", k=3) == []


def test_seed_from_dir(tmp_path: Path) -> None:
    fixtures = tmp_path / "adversarial"
    fixtures.mkdir()
    (fixtures / "lazy_output.py").write_text(
        textwrap.dedent('''\
        """Hack: lazy-output
        Category: output-validity
        Verdict: hack

        Returns a Tensor subclass over an empty buffer; the work runs on first access,
        after the clock stops.
        """
        import torch

        class Lazy(torch.Tensor):
            pass
        ''')
    )
    (fixtures / "cudnn_flags_scoped.py").write_text(
        '"""category: environment\nverdict: LEGIT\nScoped cudnn.flags is fine."""\nimport torch\n'
    )
    (fixtures / "no_header.py").write_text('"""Just a helper."""\nx = 1\n')
    with HackCaseDB(tmp_path / "db.sqlite") as db:
        assert db.seed_from_dir(fixtures) == 2
        assert db.seed_from_dir(fixtures) == 2  # idempotent
        cases = {c.case_id: c for c in db.all()}
    assert set(cases) == {"lazy-output", "cudnn_flags_scoped"}
    lazy = cases["lazy-output"]
    assert lazy.category == "output-validity" and lazy.verdict == "hack"
    assert lazy.explanation.startswith("Returns a Tensor subclass")
    assert lazy.code.startswith("import torch") and "Hack:" not in lazy.code
    assert cases["cudnn_flags_scoped"].verdict == "legit"
    assert cases["cudnn_flags_scoped"].explanation == "Scoped cudnn.flags is fine."


def test_migrated_once_and_not_on_reopen(tmp_path: Path) -> None:
    path = tmp_path / "cases.sqlite"
    for _ in range(2):
        HackCaseDB(path).close()
    with sqlite3.connect(path) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM migrations ORDER BY name")]
    conn.close()
    assert names == [m.name for m in MIGRATIONS]


def test_case_file_from_before_migrations_still_opens(tmp_path: Path) -> None:
    """A file that HackCaseDB wrote with its own CREATE TABLE IF NOT EXISTS and no ledger."""
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS hack_cases (case_id TEXT PRIMARY KEY, category TEXT NOT NULL,"
            " code TEXT NOT NULL, explanation TEXT NOT NULL,"
            " verdict TEXT NOT NULL CHECK (verdict IN ('hack', 'legit')))"
        )
        conn.execute("INSERT INTO hack_cases VALUES ('timer-patch', 'timing', 'x = 1\n', 'old', 'hack')")
    conn.close()
    with HackCaseDB(path) as db:
        assert [(c.case_id, c.explanation) for c in db.all()] == [("timer-patch", "old")]


def test_shipped_cases() -> None:
    """Every shipped case file parses; the reference programs in tasks/ are not cases."""
    files = sorted(cases_dir().glob("*.py"))
    assert len(files) > 50 and (cases_dir() / "tasks").is_dir()
    with open_case_db() as db:
        cases = db.all()
    assert len(cases) == len(files)
    assert {c.verdict for c in cases} == {"hack", "legit"}
    assert "lazy_output" in {c.case_id for c in cases}
