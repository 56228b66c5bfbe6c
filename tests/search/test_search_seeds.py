"""Seeds given with --seed (``search.seeds``): round-0 proposals with labels, origins and claims;
the plans of optimize and collect; late seeds of a resumed run, evaluated first; and a seed that
fails or is rejected is recorded but never kept, however much it claims."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from candidate_fixtures import make_result
from run_fixtures import GELU, Recorder, fast_config

from cudal1.config import CollectConfig
from cudal1.run.database import CandidateDB
from cudal1.run.events import Evaluated, RunStarted
from cudal1.run.rows import Provenance
from cudal1.run.selection import REFERENCE_LABEL, choose_best
from cudal1.schema import Candidate, Task
from cudal1.search.contrastive import ContrastivePlan
from cudal1.search.optimize import optimize
from cudal1.search.seeds import (
    SeedError,
    SeedSet,
    load_seeds,
    reference_anchor,
    seed_proposals,
    seeds_first,
    store_late_seeds,
    store_round_zero,
)
from cudal1.train.collect import CollectPlan

GOOD_SEED = reference_anchor(GELU).replace("F.gelu(x)", "F.gelu(x)  # published")
WRONG_SEED = reference_anchor(GELU).replace("F.gelu(x)", "F.relu(x)")


def kernel(
    source: str, label: str = "cuda-l1:h100", claim: float | None = 2.0, origin: str = ""
) -> Candidate:
    return Candidate(GELU.name, source, label=label, claimed_speedup=claim, origin=origin or label)


def seeds_for(task: Task, *kernels: Candidate) -> SeedSet:
    return SeedSet({task.name: tuple(seed_proposals(kernels))})


def release_file(path: Path, *records: tuple[str, float]) -> Path:
    lines = [
        {"level_id": 1, "task_id": i, "ref_code": GELU.source, "custom_code": code, "score_default": claim}
        for i, (code, claim) in enumerate(records, start=1)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def test_seed_proposals_are_labelled_uniquely_with_origin_claim_and_backend() -> None:
    proposals = seed_proposals(
        [
            kernel(GOOD_SEED, claim=1.96),
            kernel(WRONG_SEED, claim=None),
            kernel("x = 1", label="seed:cuda-l1:h100", origin="seed cuda-l1:h100 > cuda-graph"),
        ]
    )
    assert [p.label for p in proposals] == ["seed:cuda-l1:h100", "seed:cuda-l1:h100#2", "seed:cuda-l1:h100#3"]
    assert [p.origin for p in proposals] == [
        "seed cuda-l1:h100",
        "seed cuda-l1:h100",
        "seed cuda-l1:h100 > cuda-graph",  # exported by a seeded run: already a seed's chain
    ]
    assert [p.claimed_speedup for p in proposals] == [1.96, None, 2.0]
    assert {p.backend for p in proposals} == {"seed"}


def test_load_seeds_reads_a_release_and_names_an_unusable_file(tmp_path: Path) -> None:
    path = release_file(tmp_path / "cuda-l1-h100.jsonl", (GOOD_SEED, 1.96))
    seeds = load_seeds([path], [GELU])
    (proposal,) = seeds.for_task(GELU.name)
    assert (proposal.label, proposal.origin, proposal.claimed_speedup) == (
        "seed:cuda-l1:h100",
        "seed cuda-l1:h100",
        1.96,
    )
    assert seeds.count == 1 and seeds.files == (path,)
    with pytest.raises(SeedError, match="no such seed file"):
        load_seeds([tmp_path / "missing.jsonl"], [GELU])
    assert load_seeds([], [GELU]) == SeedSet()


def test_round_zero_of_optimize_and_collect_holds_the_seeds(tmp_path: Path) -> None:
    seeds = seeds_for(GELU, kernel(GOOD_SEED))
    plan = ContrastivePlan(fast_config(tmp_path, baseline_labels=["torch-compile-default"]), None, seeds)
    labels = [p.label for p in plan.seeds(GELU)]
    assert labels == ["seed:cuda-l1:h100", "torch-compile-default", REFERENCE_LABEL]  # the seed first
    assert plan.expected(GELU) == 3
    assert ContrastivePlan(fast_config(tmp_path), None).expected(GELU) == 1  # the reference alone
    collect_plan = CollectPlan(CollectConfig(samples=2), [], seeds)
    assert [p.label for p in collect_plan.seeds(GELU)] == ["seed:cuda-l1:h100"]
    assert collect_plan.expected(GELU) == 1


def test_late_seeds_are_stored_pending_in_round_zero_once(tmp_path: Path) -> None:
    with CandidateDB(tmp_path / "c.db") as db:
        first = db.add_candidate(GELU, GOOD_SEED, Provenance(backend="seed"), label="seed:cuda-l1:h100")
        db.record_result(first, make_result(GELU.name, GOOD_SEED, 1.1))
        db.finish_round(GELU.name, 0)
        other = Task("untouched", GELU.source.replace("4096", "8"))  # round 0 not done: the plan's
        seeds = SeedSet(
            {
                GELU.name: tuple(seed_proposals([kernel(GOOD_SEED), kernel(WRONG_SEED, claim=50.0)])),
                other.name: tuple(seed_proposals([kernel(GOOD_SEED)])),
            }
        )
        assert store_late_seeds(db, [GELU, other], seeds, run_id=None) == 1
        (late,) = db.pending(GELU.name)
        assert (late.round, late.backend, late.source, late.claimed_speedup) == (0, "seed", WRONG_SEED, 50.0)
        assert late.label == "seed:cuda-l1:h100#2"  # the stored seed kept its label
        assert late.origin == "seed cuda-l1:h100" and not db.pending(other.name)
        assert store_late_seeds(db, [GELU, other], seeds, run_id=None) == 0  # already stored


def test_round_zero_without_rounds_stores_seeds_of_every_task_first_then_only_new_seeds(
    tmp_path: Path,
) -> None:
    other = Task("other_gelu", GELU.source.replace("4096", "8"))
    tasks = {GELU.name: GELU, other.name: other}
    with CandidateDB(tmp_path / "c.db") as db:
        seeds = SeedSet({t: tuple(seed_proposals([kernel(GOOD_SEED)])) for t in tasks})
        run_id = db.start_run()
        store_round_zero(db, tasks, seeds, run_id, baselines=True, labels=["cudnn-benchmark"])
        rows = db.pending()  # by id: the order the caller evaluates them in
        assert [(r.task, r.label, r.backend) for r in rows] == [
            (GELU.name, "seed:cuda-l1:h100", "seed"),
            (other.name, "seed:cuda-l1:h100", "seed"),
            (GELU.name, "cudnn-benchmark", "baseline"),
            (GELU.name, REFERENCE_LABEL, "baseline"),
            (other.name, "cudnn-benchmark", "baseline"),
            (other.name, REFERENCE_LABEL, "baseline"),
        ]
        more = seeds_for(GELU, kernel(GOOD_SEED), kernel(WRONG_SEED))
        store_round_zero(db, tasks, more, run_id, baselines=True, labels=["cudnn-benchmark"])
        assert [r.source for r in db.pending(GELU.name)][3:] == [WRONG_SEED]  # the new one only
        # a resumed stage evaluates its pending candidates seeds first: the late one too
        ordered = [(r.task, r.source == WRONG_SEED, r.backend) for r in seeds_first(db.pending())]
        assert ordered[:3] == [
            (GELU.name, False, "seed"),
            (other.name, False, "seed"),
            (GELU.name, True, "seed"),
        ]
        assert [b for _, _, b in ordered[3:]] == ["baseline"] * 4


def test_a_failed_or_rejected_seed_is_never_kept_whatever_it_claims(tmp_path: Path) -> None:
    hack = GOOD_SEED.replace("published", "cached")
    with CandidateDB(tmp_path / "c.db") as db:
        ids = []
        for label, source, result in [
            (REFERENCE_LABEL, reference_anchor(GELU), make_result(GELU.name, reference_anchor(GELU), 1.0)),
            ("seed:a", WRONG_SEED, make_result(GELU.name, WRONG_SEED, 9.0, correct=False)),
            ("seed:b", hack, make_result(GELU.name, hack, 40.0, reject=True)),
        ]:
            ids.append(
                db.add_candidate(GELU, source, Provenance(backend="seed", claimed_speedup=50.0), label=label)
            )
            db.record_result(ids[-1], result)
        rows = db.evaluated(GELU.name)
        assert [r.speedup for r in rows] == [1.0, None, None]  # no effective speedup to rank by
        assert rows[2].result is not None and rows[2].result.findings  # recorded with its findings
        best = choose_best(rows)
        assert best is not None and best.label == REFERENCE_LABEL


def test_resumed_run_evaluates_new_seeds_first_and_keeps_only_a_verified_one(
    tmp_path: Path, open_db: Any
) -> None:
    run = tmp_path / "run"
    cfg = fast_config(tmp_path, rounds=0)
    optimize([GELU], run, fast_config(tmp_path, rounds=0, final={"enabled": False}))
    seeds = load_seeds([release_file(tmp_path / "h100.jsonl", (GOOD_SEED, 1.5), (WRONG_SEED, 50.0))], [GELU])
    events = Recorder()
    record = optimize([GELU], run, cfg, resume=True, seeds=seeds, progress=events)
    db = open_db(run)
    by_label = {r.label: r for r in db.evaluated(GELU.name)}
    assert set(by_label) == {REFERENCE_LABEL, "seed:cuda-l1:h100", "seed:cuda-l1:h100#2"}
    good, wrong = by_label["seed:cuda-l1:h100"], by_label["seed:cuda-l1:h100#2"]
    assert (good.round, good.backend, good.origin, good.claimed_speedup) == (
        0,
        "seed",
        "seed cuda-l1:h100",
        1.5,
    )
    assert good.correct and wrong.result is not None and not wrong.correct and wrong.claimed_speedup == 50.0
    assert {e.label for e in events.events if isinstance(e, Evaluated)} == {good.label, wrong.label}
    started = next(e for e in events.events if isinstance(e, RunStarted))
    assert started.tasks[GELU.name].total == 3  # the reference and both seeds
    kept = record.tasks[0]
    assert kept.best is not None and kept.best.id != wrong.id and kept.final is not None  # re-measured
    assert not wrong.final and not db.pending(GELU.name)
