"""Exemplar selection: distinct performance levels, k, determinism, diversity."""

from __future__ import annotations

import dataclasses
import random

import pydantic
import pytest
from candidate_fixtures import make_result

from cudal1.run.database import CandidateDB
from cudal1.schema import SpeedOfLight, Stage
from cudal1.search.exemplars import ExemplarConfig, select_exemplars


def distinct_source(i: int) -> str:
    """Sources that share few tokens, so the diversity filter leaves them alone."""
    words = " + ".join(f"w{i}_{j}" for j in range(12))
    return f"class ModelNew(nn.Module):\n    def forward(self, x):\n        return {words}\n"


def store(db: CandidateDB, task, speedups, *, sources=None, start=0):
    for n, s in enumerate(speedups):
        i = start + n
        source = sources[n] if sources else distinct_source(i)
        cid = db.add_candidate(task, source)
        db.record_result(cid, make_result(task.name, source, s))
    return db.evaluated(task.name)


@pytest.fixture
def db(tmp_path):
    with CandidateDB(tmp_path / "c.sqlite") as d:
        yield d


def bucket(speedup: float, edges=(1.0, 1.25, 2.0)) -> int:
    return sum(speedup >= e for e in edges)


def test_picks_one_per_bucket_and_respects_k(db, gemm_task):
    rows = store(db, gemm_task, [0.5, 0.6, 0.7, 1.1, 1.2, 1.5, 1.6, 3.0, 4.0, 5.0])
    for seed in range(20):
        picked = select_exemplars(rows, ExemplarConfig(k=4), random.Random(seed))
        assert len(picked) == 4
        assert sorted(bucket(e.speedup) for e in picked) == [0, 1, 2, 3]
        assert [e.speedup for e in picked] == sorted(e.speedup for e in picked)  # slowest first
        assert all(e.correct and e.candidate_id is not None for e in picked)
    two = select_exemplars(rows, ExemplarConfig(k=2), random.Random(0))
    assert len(two) == 2 and bucket(two[-1].speedup) == 3  # the top level is always shown


def test_deterministic_given_a_seed(db, gemm_task):
    rows = store(db, gemm_task, [0.5 + 0.1 * i for i in range(30)])
    config = ExemplarConfig(k=4, bucketing="quantiles", quantile_buckets=4, temperature=2.0)
    runs = [[e.candidate_id for e in select_exemplars(rows, config, random.Random(7))] for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]
    other = {
        tuple(e.candidate_id for e in select_exemplars(rows, config, random.Random(s))) for s in range(10)
    }
    assert len(other) > 1


def test_quantile_buckets_spread_over_the_task_range(db, gemm_task):
    rows = store(db, gemm_task, [1.0 + 0.01 * i for i in range(40)])  # all in one fixed-edge bucket
    picked = select_exemplars(rows, ExemplarConfig(k=4, bucketing="quantiles"), random.Random(0))
    assert sorted((e.speedup - 1.0) // 0.1 for e in picked) == [0, 1, 2, 3]


def test_low_temperature_prefers_the_fastest_in_a_bucket(db, gemm_task):
    rows = store(db, gemm_task, [2.0, 2.5, 8.0])
    picks = [
        select_exemplars(rows, ExemplarConfig(k=1, temperature=0.05), random.Random(s))[0].speedup
        for s in range(20)
    ]
    assert picks == [8.0] * 20


def test_near_duplicates_are_skipped(db, gemm_task):
    base = distinct_source(0)
    sources = [base, base + "# tweak\n", base.replace("w0_5 ", "w0_5b "), distinct_source(1)]
    rows = store(db, gemm_task, [3.0, 3.1, 3.2, 3.3], sources=sources)
    picked = select_exemplars(rows, ExemplarConfig(k=4, diversity_threshold=0.8), random.Random(0))
    assert len(picked) == 2
    assert distinct_source(1) in {e.source for e in picked}
    loose = select_exemplars(rows, ExemplarConfig(k=4, diversity_threshold=1.0), random.Random(0))
    assert len(loose) == 4


def test_fewer_candidates_than_k_and_none(db, gemm_task):
    assert select_exemplars([], ExemplarConfig(), random.Random(0)) == []
    rows = store(db, gemm_task, [1.5, 0.9])
    picked = select_exemplars(rows, ExemplarConfig(k=4), random.Random(0))
    assert [e.speedup for e in picked] == [0.9, 1.5]


def test_failed_variant_included_on_request(db, gemm_task):
    rows = store(db, gemm_task, [1.2, 2.5, 0.8, 1.6])
    bad = distinct_source(99)
    cid = db.add_candidate(gemm_task, bad)
    db.record_result(cid, make_result(gemm_task.name, bad, None, failed_stage=Stage.COMPILE))
    rows = db.evaluated(gemm_task.name)
    assert all(e.correct for e in select_exemplars(rows, ExemplarConfig(k=4), random.Random(0)))
    picked = select_exemplars(rows, ExemplarConfig(k=4, include_failed=True), random.Random(0))
    assert len(picked) == 4 and not picked[0].correct and picked[0].speedup is None
    assert picked[0].error == "compile stage failed: compile exploded at line 3"
    assert all(e.correct for e in picked[1:])
    only_failed = select_exemplars(
        [r for r in rows if r.id == cid], ExemplarConfig(include_failed=True), random.Random(0)
    )
    assert [e.candidate_id for e in only_failed] == [cid]


def test_rejected_variant_is_shown_as_incorrect_with_the_reason(db, gemm_task):
    source = distinct_source(5)
    cid = db.add_candidate(gemm_task, source)
    db.record_result(cid, make_result(gemm_task.name, source, 40.0, reject=True))
    picked = select_exemplars(
        db.evaluated(gemm_task.name), ExemplarConfig(include_failed=True), random.Random(0)
    )
    assert picked[0].error == "rejected: outputs reused across calls" and not picked[0].correct


def test_config_is_strict():
    with pytest.raises(pydantic.ValidationError):
        ExemplarConfig(kk=3)
    with pytest.raises(pydantic.ValidationError):
        ExemplarConfig(bucketing="random")
    assert ExemplarConfig.model_fields["temperature"].description


def test_an_exemplar_carries_its_speed_of_light_and_the_tasks_bound(db, gemm_task):
    source = distinct_source(6)
    cid = db.add_candidate(gemm_task, source)
    sol = SpeedOfLight("float32", 1e9, 1e6, 0.4, 0.1, 40.0, 80.0, "measured")
    db.record_result(cid, dataclasses.replace(make_result(gemm_task.name, source, 2.0), sol=sol))
    (picked,) = select_exemplars(db.evaluated(gemm_task.name), ExemplarConfig(), random.Random(0))
    assert (picked.sol_percent, picked.bound) == (80.0, "memory")  # reference 1 ms, floors 0.4/0.1 ms
