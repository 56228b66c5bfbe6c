"""Candidate database: migrations, atomic writes, resume, best, dedupe, concurrency."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import threading

import pytest
from candidate_fixtures import make_result

from cudal1.run.database import CandidateDB, DuplicateSourceError
from cudal1.run.migrations import MIGRATIONS
from cudal1.run.rows import CandidateStatus, Provenance
from cudal1.schema import Stage, Task, source_hash
from cudal1.storage import migrate

OTHER_TASK = Task(name="other", source="class Model: pass\n")


def src(i: int) -> str:
    return f"class ModelNew:\n    VARIANT = {i}\n"


@pytest.fixture
def db(tmp_path):
    with CandidateDB(tmp_path / "run" / "candidates.sqlite") as d:
        yield d


def test_migrations_idempotent_on_reopen(tmp_path, gemm_task):
    path = tmp_path / "c.sqlite"
    with CandidateDB(path) as d:
        d.add_candidate(gemm_task, src(1))
    for _ in range(2):
        with CandidateDB(path) as d:
            assert d.counts(gemm_task.name).total == 1
    conn = sqlite3.connect(path)
    names = [r[0] for r in conn.execute("SELECT name FROM migrations ORDER BY name")]
    assert names == [name for name, _ in MIGRATIONS]
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_database_from_a_newer_version_is_refused(tmp_path):
    path = tmp_path / "c.sqlite"
    CandidateDB(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO migrations VALUES ('9999_from_the_future', 'now')")
    with pytest.raises(RuntimeError, match="newer cudal1"):
        CandidateDB(path)


def test_interrupted_transaction_leaves_no_partial_rows(tmp_path, gemm_task):
    path = tmp_path / "c.sqlite"
    with CandidateDB(path) as d:
        keep = d.add_candidate(gemm_task, src(0))
        with pytest.raises(RuntimeError, match="killed"), d.transaction():
            d.add_candidate(gemm_task, src(1))
            d.record_result(keep, make_result(gemm_task.name, src(0), 2.0))
            raise RuntimeError("killed mid-round")
        assert d.counts(gemm_task.name).total == 1
        assert d.get(keep).status is CandidateStatus.PENDING
    with CandidateDB(path) as d:
        assert [r.id for r in d.pending()] == [keep]


def test_process_killed_inside_a_write_loses_only_that_write(tmp_path, gemm_task):
    path = tmp_path / "c.sqlite"
    with CandidateDB(path) as d:
        d.add_candidate(gemm_task, src(0))
    child = textwrap.dedent(f"""
        import os
        from cudal1.schema import Task
        from cudal1.run.database import CandidateDB
        db = CandidateDB({str(path)!r})
        task = Task({gemm_task.name!r}, {gemm_task.source!r})
        with db.transaction():
            db.add_candidate(task, "class ModelNew: pass\\n")
            os._exit(9)  # no commit, no cleanup: what SIGKILL does
    """)
    assert subprocess.run([sys.executable, "-c", child], timeout=60).returncode == 9
    with CandidateDB(path) as d:
        assert d.counts(gemm_task.name).total == 1


def test_resume_evaluates_what_was_pending(tmp_path, gemm_task):
    path = tmp_path / "c.sqlite"
    with CandidateDB(path) as d:
        ids = [d.add_candidate(gemm_task, src(i), Provenance(round=0, backend="scripted")) for i in range(3)]
        d.record_result(ids[1], make_result(gemm_task.name, src(1), 1.5))
    with CandidateDB(path) as d:  # the run was killed here and restarted
        pending = d.pending()
        assert [r.id for r in pending] == [ids[0], ids[2]]
        assert all(r.status is CandidateStatus.PENDING and r.result is None for r in pending)
        for row in pending:
            d.record_result(row.id, make_result(gemm_task.name, row.source, 1.1))
        assert d.pending() == []
        assert len(d.evaluated(gemm_task.name)) == 3


def test_result_round_trips_and_columns_follow_it(db, gemm_task):
    cid = db.add_candidate(
        gemm_task,
        src(1),
        Provenance(parent_ids=(4, 7), prompt_hash="ab", round=2),
        label="x",
        analysis="fused it",
    )
    result = make_result(gemm_task.name, src(1), 2.5, warning="wraps the reference")
    db.record_result(cid, result)
    row = db.get(cid)
    assert row.result == result
    assert (row.speedup, row.correct, row.parent_ids, row.round) == (2.5, True, (4, 7), 2)
    assert (row.prompt_hash, row.label, row.analysis) == ("ab", "x", "fused it")
    assert row.evaluated_at is not None


def test_record_result_refuses_mismatch_and_double_recording(db, gemm_task):
    cid = db.add_candidate(gemm_task, src(1))
    with pytest.raises(ValueError, match="does not match"):
        db.record_result(cid, make_result(gemm_task.name, src(2), 2.0))
    assert db.get(cid).status is CandidateStatus.PENDING
    db.record_result(cid, make_result(gemm_task.name, src(1), 2.0))
    with pytest.raises(ValueError, match="not pending"):
        db.record_result(cid, make_result(gemm_task.name, src(1), 3.0))
    with pytest.raises(KeyError):
        db.record_result(999, make_result(gemm_task.name, src(1), 3.0))


def test_best_counts_only_correct_accepted_results(db, gemm_task):
    outcomes = {
        1: make_result(gemm_task.name, src(1), 1.4),
        2: make_result(gemm_task.name, src(2), 9.0, correct=False),
        3: make_result(gemm_task.name, src(3), 50.0, reject=True),
        4: make_result(gemm_task.name, src(4), None, failed_stage=Stage.COMPILE),
        5: make_result(gemm_task.name, src(5), 2.2),
        6: make_result(gemm_task.name, src(6), 2.2),
    }
    ids = {}
    for i, result in outcomes.items():
        ids[i] = db.add_candidate(gemm_task, src(i))
        db.record_result(ids[i], result)
    best = db.best(gemm_task.name)
    assert best is not None and best.id == ids[5]  # the tie goes to the earlier one
    assert db.best(OTHER_TASK.name) is None
    other = db.add_candidate(OTHER_TASK, src(1))
    db.record_result(other, make_result(OTHER_TASK.name, src(1), 1.05))
    assert {t: r.id for t, r in db.best_per_task().items()} == {
        gemm_task.name: ids[5],
        OTHER_TASK.name: other,
    }
    counts = db.counts(gemm_task.name)
    assert (counts.total, counts.evaluated, counts.correct, counts.ok, counts.faster) == (6, 6, 4, 3, 3)


def test_same_source_is_never_stored_twice_for_a_task(db, gemm_task):
    first = db.add_candidate(gemm_task, src(1))
    with pytest.raises(DuplicateSourceError) as err:
        db.add_candidate(gemm_task, src(1), Provenance(round=3))
    assert err.value.existing_id == first
    found = db.find_by_hash(gemm_task.name, source_hash(src(1)))
    assert found is not None and found.id == first
    assert db.find_by_hash(gemm_task.name, source_hash(src(2))) is None
    db.add_candidate(OTHER_TASK, src(1))  # the same source for another task is another candidate
    db.record_parse_failure(gemm_task, "no code here", "no code block defines class ModelNew")
    db.record_parse_failure(gemm_task, "no code here", "no code block defines class ModelNew")
    counts = db.counts(gemm_task.name)
    assert (counts.total, counts.pending, counts.parse_failed) == (3, 1, 2)


def test_parse_failures_are_never_pending(db, gemm_task):
    cid = db.record_parse_failure(gemm_task, "```python\nclass ModelNew(", "does not parse", analysis="a")
    row = db.get(cid)
    assert row.status is CandidateStatus.PARSE_FAILED and row.parse_error == "does not parse"
    assert db.pending() == [] and db.evaluated(gemm_task.name) == []


def test_rounds_done_counts_finished_rounds_without_gaps(db, gemm_task):
    assert db.rounds_done(gemm_task.name) == 0
    cid = db.add_candidate(gemm_task, src(1), Provenance(round=0))
    with pytest.raises(ValueError, match="pending"):
        db.finish_round(gemm_task.name, 0)
    db.record_result(cid, make_result(gemm_task.name, src(1), 1.0))
    db.finish_round(gemm_task.name, 0)
    db.finish_round(gemm_task.name, 2)
    assert db.rounds_done(gemm_task.name) == 1
    db.finish_round(gemm_task.name, 1)
    assert db.rounds_done(gemm_task.name) == 3
    assert db.rounds_done(OTHER_TASK.name) == 0


def test_runs_meta_and_final(db, gemm_task):
    run = db.start_run(config="k: 4\n", note="first")
    cid = db.add_candidate(gemm_task, src(1), Provenance(run_id=run))
    db.set_final(cid)
    assert db.get(cid).final and db.get(cid).run_id == run
    db.set_meta("suite", "bundled")
    assert db.get_meta("suite") == "bundled" and db.get_meta("missing") is None


def _write_many(db: CandidateDB, task: Task, start: int, n: int, errors: list[BaseException]) -> None:
    try:
        for i in range(start, start + n):
            cid = db.add_candidate(task, src(i))
            db.record_result(cid, make_result(task.name, src(i), 1.0 + i / 100))
    except BaseException as e:  # surfaced by the test thread
        errors.append(e)


@pytest.mark.parametrize("shared", [True, False], ids=["one-connection", "two-connections"])
def test_concurrent_writers_from_two_threads(tmp_path, gemm_task, shared):
    path = tmp_path / "c.sqlite"
    dbs = [CandidateDB(path)] * 2 if shared else [CandidateDB(path), CandidateDB(path)]
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=_write_many, args=(d, gemm_task, k * 100, 40, errors))
        for k, d in enumerate(dbs)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    rows = dbs[0].evaluated(gemm_task.name)
    assert len(rows) == 80 and len({r.id for r in rows}) == 80
    best = dbs[0].best(gemm_task.name)
    assert best is not None and best.speedup == pytest.approx(2.39)
    for d in set(dbs):
        d.close()


def test_origin_chain_base_and_claim_round_trip(db, gemm_task):
    seed = db.add_candidate(
        gemm_task, src(1), Provenance(backend="seed", origin="seed cuda-l1:h100", claimed_speedup=1.96)
    )
    composed = db.add_candidate(
        gemm_task,
        src(2),
        Provenance(backend="compose", origin="seed cuda-l1:h100 > cuda-graph", base_id=seed),
    )
    rows = {r.id: r for r in db.pending(gemm_task.name)}
    assert (rows[seed].origin, rows[seed].claimed_speedup, rows[seed].base_id) == (
        "seed cuda-l1:h100",
        1.96,
        None,
    )
    assert (rows[composed].origin, rows[composed].base_id) == ("seed cuda-l1:h100 > cuda-graph", seed)
    assert rows[composed].claimed_speedup is None


def test_a_database_from_before_origins_gains_empty_ones(tmp_path, gemm_task):
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    migrate(conn, MIGRATIONS[:2], where=str(path))
    conn.close()
    with CandidateDB(path) as d:
        cid = d.add_candidate(gemm_task, src(1))
        (row,) = d.pending(gemm_task.name)
    assert (row.id, row.origin, row.base_id, row.claimed_speedup) == (cid, "", None, None)
