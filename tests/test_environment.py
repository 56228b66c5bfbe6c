"""``EvalResult.environment`` as stored: results written before it was typed load (unknown keys
kept, not an error), and a loaded result stores the same JSON object again."""

from __future__ import annotations

import json

from cudal1.schema import Environment, EvalResult, PoolPlacement

STORED = {
    "task": "t",
    "candidate_hash": "h",
    "device": "cuda:0",
    "environment": {
        "torch": "2.5.1",
        "cuda": "12.4",
        "python": "3.11.9",
        "gpu": "NVIDIA H100 80GB HBM3",
        "arch": "9.0",
        "seed": 12345,
        "device_s": {"sampling": 1.5, "check_calls": 0.25},
        "workers_paused_while_timed": 0,
        "float64_error": "RuntimeError: no float64",
        "sol_error": "TypeError: bad peaks",
        "out_of_memory": True,
        "probes": {"shapes": {"sizes": {"batch_size": 9}, "ok": True}},
        "build_cache_hit": False,
        "retried_after": "CUDA error: out of memory",
        "requeued_after": "Ray actor lost",
        "pool": {
            "kind": "ray",
            "devices": 1,
            "device_counts": {"cuda:0": 3},
            "node": "n1",
            "actor": "a1",
            "gpu_ids": ["0"],
            "attempts": 2,
        },
    },
}


def test_a_stored_environment_loads_into_its_fields_and_stores_the_same_object():
    result = EvalResult.from_dict(json.loads(json.dumps(STORED)))
    env = result.environment
    assert env.gpu == "NVIDIA H100 80GB HBM3" and env.seed == 12345 and env.out_of_memory
    assert env.build_cache_hit is False and env.workers_paused_while_timed == 0
    assert env.probes["shapes"]["sizes"] == {"batch_size": 9}
    assert env.pool == PoolPlacement("ray", 1, {"cuda:0": 3}, "n1", "a1", ("0",), 2)
    assert not env.extra
    assert result.to_dict()["environment"] == STORED["environment"]
    assert EvalResult.from_dict(result.to_dict()) == result


def test_unknown_keys_are_kept_and_unset_fields_left_out():
    stored = {
        **STORED,
        "environment": {"gpu": None, "seed": 7, "later_key": [1], "pool": {"kind": "local", "x": 1}},
    }
    env = EvalResult.from_dict(stored).environment
    assert env.seed == 7 and env.gpu is None and env.extra == {"later_key": [1]}
    assert env.pool is not None and env.pool.extra == {"x": 1}
    assert env.to_dict() == {"later_key": [1], "seed": 7, "pool": {"kind": "local", "x": 1}}
    assert (
        EvalResult.from_dict({"task": "t", "candidate_hash": "h", "device": "cpu"}).environment
        == Environment()
    )


def test_facts_added_after_the_evaluation_make_a_new_result():
    result = EvalResult("t", "h", "cpu", environment=Environment(seed=1))
    again = result.with_environment(retried_after="boom")
    assert again.environment.retried_after == "boom" and again.environment.seed == 1
    assert result.environment.retried_after is None
