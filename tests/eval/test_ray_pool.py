"""The Ray pool on CPU: a local Ray cluster with two fake GPUs (Ray only counts them; each actor
evaluates on the CPU), exercising scheduling, streaming, backpressure and the fault paths.

Ray's wheel is too large to carry to the GPU machine, so this is where the Ray pool is tested; the
actors run the same local pool as ``tests/eval/test_evaluator.py`` does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cudal1.config import GuardConfig, PoolConfig, RayPoolConfig
from cudal1.eval.pool_kinds import make_pool
from cudal1.schema import EvalRequest, Stage

ray = pytest.importorskip("ray")

LIGHT = GuardConfig(poison=False, perturbed_elements=0, alternative_shapes="off", init_inputs=False)
RIGHT = "        return torch.relu(self.lin(x))  # {tag}"


@pytest.fixture(scope="module", autouse=True)
def cluster():
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, logging_level="ERROR")
    yield
    ray.shutdown()


@pytest.fixture
def config(fast_config):
    """What these tests look at is where and when evaluations run, not the checks: the fewest."""
    return fast_config.model_copy(update={"time": False, "correctness_trials": 1, "guards": LIGHT})


def ray_pool(config, **settings):
    return make_pool(config, PoolConfig(kind="ray", spares=0, ray=RayPoolConfig(**settings)))


def slow_import(candidate_source: str, seconds: float, log: Path | None = None, tag: str = "") -> str:
    """``candidate_source`` whose import takes ``seconds``, noting its start and end in ``log``."""
    note = (
        f"open({str(log)!r}, 'a').write(f'{tag} begin {{time.time()}}\\n')\n" if log else ""
    ) + f"time.sleep({seconds})\n"
    if log:
        note += f"open({str(log)!r}, 'a').write(f'{tag} end {{time.time()}}\\n')\n"
    return "import time\n" + note + candidate_source


def kills_its_actor(candidate_source: str, marker: Path | None = None) -> str:
    """A candidate whose import kills the process that started its worker: the Ray actor. With
    ``marker``, only the first time (the marker file remembers)."""
    kill = "os.kill(os.getppid(), signal.SIGKILL); time.sleep(30)"
    if marker is not None:
        kill = f"if not os.path.exists({str(marker)!r}):\n    open({str(marker)!r}, 'w').close()\n    {kill}"
    return f"import os, signal, time\n{kill}\n" + candidate_source


def test_one_actor_per_gpu_results_stream_and_the_rest_wait_their_turn(task, config, candidate, tmp_path):
    """Two fake GPUs, one candidate per actor: the two first requests run side by side and come
    back in the order they finish; the third is sent only once a slot is free."""
    log = tmp_path / "imports.log"
    seconds = {"slow": 3, "fast": 0, "third": 0}
    requests = [
        EvalRequest(task, slow_import(candidate(RIGHT.format(tag=t)), s, log, t), t)
        for t, s in seconds.items()
    ]
    with ray_pool(config, candidates_per_actor=1) as pool:
        assert pool.devices == () and pool.capacity == 2
        got = list(pool.evaluate_many(requests))
    assert got[0][0].request_id == "fast"
    assert all(res.correct for _, res in got), [res.error for _, res in got]
    where = [res.environment.pool for _, res in got]
    assert all(w is not None and w.kind == "ray" and w.attempts == 1 for w in where)
    assert {w.gpu_ids[0] for w in where if w is not None and w.gpu_ids} == {
        "0",
        "1",
    }  # one GPU each, both used
    assert {res.device for _, res in got} == {"cpu"}
    times = {
        (tag, what): float(t) for tag, what, t in (line.split() for line in log.read_text().splitlines())
    }
    assert times["third", "begin"] > min(times["slow", "end"], times["fast", "end"])


def test_a_lost_actor_requeues_its_candidate_once_then_records_an_evaluator_error(
    task, config, candidate, tmp_path
):
    """An actor killed mid-evaluation (its candidate kills it while being imported): the candidate
    goes once more to a fresh actor; lost a second time, it is an evaluator error, never the
    candidate's failure."""
    once = kills_its_actor(candidate(RIGHT.format(tag="once")), marker=tmp_path / "killed")
    always = kills_its_actor(candidate(RIGHT.format(tag="always")))
    with ray_pool(config, candidates_per_actor=1) as pool:
        recovered = pool.evaluate(task, once)
        lost = pool.evaluate(task, always)
        assert pool.actors() == 2  # each dead actor was replaced
    assert recovered.correct, recovered.error  # on the replacement actor
    assert recovered.environment.pool.attempts == 2
    assert "Ray actor lost" in (recovered.environment.requeued_after or "")
    assert lost.evaluator_error and lost.failed_stage is Stage.EVALUATOR
    assert lost.environment.pool.attempts == 2
    assert lost.error.count("Ray actor lost") == 2
