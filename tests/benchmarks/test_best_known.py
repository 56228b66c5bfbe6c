"""The best-known-kernel benchmark's reading of a run: who wins a task, whether cudal1's kept kernel
holds against the best of torch.compile, CUDA graph and the published kernel, and the draw."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from candidate_fixtures import GEMM_TASK, make_result

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from best_known import compare_task, draw, summarize  # noqa: E402

from cudal1.run.database import CandidateDB, Provenance  # noqa: E402
from cudal1.run.records import TaskRecord  # noqa: E402
from cudal1.schema import Candidate, Task  # noqa: E402


def _store(db, label, speedup, backend="baseline", origin="", base_id=None, **kw):
    source = f"class ModelNew:\n    LABEL = {label!r}\n"
    cid = db.add_candidate(
        GEMM_TASK, source, Provenance(backend=backend, origin=origin, base_id=base_id), label=label
    )
    db.record_result(cid, make_result(GEMM_TASK.name, source, speedup, **kw))
    return cid


def _record(db, best_id):
    rows = db.evaluated(GEMM_TASK.name)
    best = next(r for r in rows if r.id == best_id)
    return TaskRecord(GEMM_TASK.name, 1, best, None, best.result, db.counts(GEMM_TASK.name), 1), rows


@pytest.fixture
def db(tmp_path):
    with CandidateDB(tmp_path / "c.db") as d:
        yield d


def test_a_composition_over_the_published_kernel_wins_and_holds(db):
    _store(db, "torch-compile-default", 1.5)
    _store(db, "torch-compile-max-autotune", 1.8)
    _store(db, "cuda-graph", 1.1)
    seed = _store(db, "seed:h100", 1.6, backend="seed", origin="seed cuda-l1:h100")
    kept = _store(
        db, "cuda-graph@seed", 2.4, backend="compose", origin="seed cuda-l1:h100 > cuda-graph", base_id=seed
    )
    c = compare_task(*_record(db, kept))
    assert c.best_compile.name == "torch-compile-max-autotune" and c.published.speedup == 1.6
    assert c.best_other.speedup == 1.8 and c.kept_holds and c.composed_win
    assert c.kept.origin == "seed cuda-l1:h100 > cuda-graph"
    s = summarize([c])
    assert s["kept_below_best_other"] == [] and s["composed_wins"][0]["task"] == GEMM_TASK.name
    assert s["kept_geomean_over_best_compile"] == pytest.approx(2.4 / 1.8)


def test_a_kept_kernel_below_the_best_compile_mode_is_named(db):
    _store(db, "torch-compile-default", 3.0)
    weak = _store(db, "seed:h100", 1.2, backend="seed")
    c = compare_task(*_record(db, weak))
    assert not c.kept_holds and summarize([c])["kept_below_best_other"] == [GEMM_TASK.name]


def test_a_rejected_published_kernel_shows_why_and_does_not_count(db):
    _store(db, "torch-compile-default", 1.3)
    _store(db, "seed:h100", 40.0, backend="seed", reject=True)
    kept = _store(db, "torch-compile-reduce-overhead", 1.4)
    c = compare_task(*_record(db, kept))
    assert c.published.speedup is None and c.published.status
    assert c.best_other.name == "torch-compile-reduce-overhead" and c.kept_holds and not c.composed_win


def test_the_draw_is_seeded_per_level_and_skips_records_without_a_kernel():
    records = []
    for level in (1, 2):
        for i in range(6):
            task = Task(name=f"L{level}_{i}", source=f"class Model: X = {level}{i}\n", level=level)
            records.append((task, None if i == 0 else Candidate(task.name, "class ModelNew: pass\n")))
    first, again = draw(records, 3, seed=7), draw(records, 3, seed=7)
    assert [t.name for t, _ in first] == [t.name for t, _ in again]
    assert [t.level for t, _ in first] == [1, 1, 1, 2, 2, 2]
    assert all(t.name not in ("L1_0", "L2_0") for t, _ in first)


def test_a_task_with_nothing_measured_yet_has_no_verdict(db):
    db.add_candidate(
        GEMM_TASK, "class ModelNew:\n    PENDING = 1\n", Provenance(backend="baseline"), label="cuda-graph"
    )
    record = TaskRecord(GEMM_TASK.name, 1, None, None, None, db.counts(GEMM_TASK.name), 0)
    c = compare_task(record, [])
    assert c.kept.speedup is None and c.kept.status == "not run"
    assert summarize([c])["tasks_measured"] == 0


def test_a_vs_a_reads_the_reference_anchor_into_a_column_and_a_summary_line(db):
    from best_known import a_vs_a_summary, table
    from rich.console import Console

    _store(db, "cuda-graph", 1.2)
    anchor = _store(db, "reference", 0.95, backend="baseline", origin="reference")
    c = compare_task(*_record(db, anchor))
    assert c.anchor is not None and c.anchor.speedup == pytest.approx(0.95) and not c.anchor.contains_one
    s = a_vs_a_summary([c])
    assert s["measured"] == 1 and s["contain_one"] == 0 and s["clocks"] == {"events": 1}
    assert s["line"].startswith("A-vs-A (the reference as its own candidate): 0/1 intervals contain 1.0")
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(table([c], a_vs_a=True))
    text = console.export_text()
    assert "A-vs-A [95% CI] clock" in text and "0.950 [0.941,0.959] events !" in text
    assert "0/1 intervals contain 1.0" in text
    console.print(table([c]))
    assert console.export_text().count("A-vs-A") == 0


def test_the_a_vs_a_mode_runs_optimize_with_its_flag(tmp_path):
    import argparse

    from best_known import optimize_command

    args = argparse.Namespace(
        budget_s=1.0, final_budget_s=3.0, workers=6, resume=False, set=None, a_vs_a=True
    )
    assert "--a-vs-a" in optimize_command(args, tmp_path / "t.jsonl", tmp_path / "run")
    args.a_vs_a = False
    assert "--a-vs-a" not in optimize_command(args, tmp_path / "t.jsonl", tmp_path / "run")
