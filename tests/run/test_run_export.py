"""``run.export``: a run's kept kernels (or every verified candidate) as records that ``verify``
and ``--seed`` read back, built from a run directory written by hand (no evaluator), and the
origin of a kept seed in ``runs show``."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from candidate_fixtures import GEMM_TASK, make_result
from rich.console import Console

from cudal1.config import OptimizeConfig
from cudal1.report.runs import render_run_markdown, render_run_summary, summarize_run
from cudal1.run.database import CandidateDB
from cudal1.run.directory import RunDirectory, RunError, record_final, remember_tasks
from cudal1.run.export import ExportError, export_kernels
from cudal1.run.records import load_run
from cudal1.run.rows import Provenance
from cudal1.run.selection import REFERENCE_LABEL
from cudal1.schema import Task
from cudal1.tasks import load_cuda_l1_records, match_seed_files

GEMM = Task(GEMM_TASK.name, GEMM_TASK.source, level=2, origin="bundled")
SLOW = Task("no_gain", GEMM_TASK.source.replace("16", "12"), level=1, origin="cuda-l1")
SEED = "class ModelNew: pass  # published\n"
BASELINE = "class ModelNew: pass  # cuda graph\n"
LLM = "class ModelNew: pass  # written by a model\n"


def add(db: CandidateDB, task: Task, label: str, source: str, speedup: float | None, **prov: object) -> int:
    cid = db.add_candidate(task, source, Provenance(**prov), label=label)  # type: ignore[arg-type]
    db.record_result(cid, make_result(task.name, source, speedup, correct=speedup is not None))
    return cid


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """GEMM keeps a seed (1.96x claimed, 1.5x measured, re-measured at 1.4x); SLOW has only
    variants within the reference's noise; a model's wrong reply and a baseline are verified or not."""
    path = tmp_path / "run"
    RunDirectory(path).write_config(OptimizeConfig())
    with CandidateDB(path / "candidates.db") as db:
        remember_tasks(db, [GEMM, SLOW])
        add(db, GEMM, REFERENCE_LABEL, "class ModelNew: pass  # ref\n", 1.0, origin=REFERENCE_LABEL)
        add(db, GEMM, "cuda-graph", BASELINE, 1.2, backend="baseline", origin="cuda-graph")
        seed = add(
            db,
            GEMM,
            "seed:cuda-l1:h100",
            SEED,
            1.5,
            backend="seed",
            origin="seed cuda-l1:h100",
            claimed_speedup=1.96,
        )
        add(db, GEMM, "llm-r1-s0", LLM, None, backend="openai", model="m")
        record_final(db, db.get(seed), make_result(GEMM.name, SEED, 1.4))
        add(db, SLOW, REFERENCE_LABEL, "class ModelNew: pass  # ref 2\n", 1.0, origin=REFERENCE_LABEL)
        add(db, SLOW, "llm-r1-s0", LLM, 1.005, backend="scripted", model="scripted:reply")
    return path


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_kept_kernels_are_exported_with_their_measurement_and_provenance(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "kept.jsonl"
    summary = export_kernels(run, out)
    assert (summary.records, summary.tasks, summary.left_out) == (1, (GEMM.name,), (SLOW.name,))
    (record,) = lines(out)
    assert record["task"] == GEMM.name and record["level"] == 2 and record["ref_code"] == GEMM.source
    assert record["custom_code"] == SEED and record["label"] == "seed:cuda-l1:h100"
    assert record["origin"] == "bundled"  # the task's origin
    assert record["provenance"] == "seed cuda-l1:h100"
    # the final re-evaluation's numbers: what this machine measured is the claim for the next
    assert record["claimed_speedup"] == record["speedup"] == 1.4
    assert record["ci_low"] == pytest.approx(1.386) and record["ci_high"] == pytest.approx(1.414)
    assert record["device"] == "cpu" and record["gpu"] is None and record["run"] == str(run.resolve())

    ((task, cand),) = load_cuda_l1_records(out)  # what verify reads
    assert (task.name, task.origin, task.hash) == (GEMM.name, "bundled", GEMM.hash)
    assert cand is not None and cand.claimed_speedup == 1.4
    match = match_seed_files([out], [Task("renamed", GEMM.source)])  # what --seed reads
    (seed,) = match.kernels["renamed"]
    assert (seed.source, seed.origin) == (SEED, "seed cuda-l1:h100")


def test_all_exports_every_verified_candidate_but_the_reference(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "all.jsonl"
    summary = export_kernels(run, out, every=True)
    records = lines(out)
    assert [(r["task"], r["label"], r["provenance"], r["claimed_speedup"]) for r in records] == [
        (GEMM.name, "cuda-graph", "cuda-graph", 1.2),
        (GEMM.name, "seed:cuda-l1:h100", "seed cuda-l1:h100", 1.4),  # its final re-evaluation
        (SLOW.name, "llm-r1-s0", "scripted:reply", 1.005),  # the model that wrote it
    ]
    assert summary.left_out == () and len(load_cuda_l1_records(out)) == 3


def test_bad_runs_and_unwritable_files_are_errors(run: Path, tmp_path: Path) -> None:
    with pytest.raises(RunError, match="not a cudal1 run directory"):
        export_kernels(tmp_path / "nowhere", tmp_path / "x.jsonl")
    with pytest.raises(ExportError, match="cannot write"):
        export_kernels(run, tmp_path / "missing-dir" / "x.jsonl")
    assert not list(tmp_path.glob("**/.x.jsonl.partial"))
    empty = tmp_path / "empty"
    RunDirectory(empty).write_config(OptimizeConfig())
    with CandidateDB(empty / "candidates.db") as db:
        remember_tasks(db, [SLOW])
        add(db, SLOW, REFERENCE_LABEL, "class ModelNew: pass\n", 1.0)
    with pytest.raises(ExportError, match="nothing to export"):
        export_kernels(empty, tmp_path / "y.jsonl")
    assert not (tmp_path / "y.jsonl").exists()


def test_runs_show_says_where_a_kept_seed_came_from(run: Path) -> None:
    summary = summarize_run(load_run(run))
    task = next(t for t in summary.tasks if t.task == GEMM.name)
    assert (task.origin, task.claimed_speedup) == ("seed cuda-l1:h100", 1.96)
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(render_run_summary(summary, 80))
    text = console.export_text()
    assert "origin of the kept kernels:" in text
    assert f"{GEMM.name}: seed cuda-l1:h100 (claimed 1.960x)" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    assert f"- {GEMM.name}: seed cuda-l1:h100 (claimed 1.960x)" in render_run_markdown(summary)
