"""The Ray pool when a node is lost and never comes back: a two-node local cluster (the head
with no GPU, a worker node with one fake GPU); the worker node is removed while its actor
evaluates. The candidate is re-queued once, no replacement can start (no GPU is left), and it
is recorded as an evaluator error, never as the candidate's failure.

Its own module: a multi-node cluster cannot share the process with test_ray_pool's one-node one.
"""

from __future__ import annotations

import time

import pytest

from cudal1.config import PoolConfig, RayPoolConfig
from cudal1.eval.pool_kinds import make_pool
from cudal1.schema import EvalRequest, Stage

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

START_TIMEOUT_S = 15.0  # the first actor must start within it on a loaded 2-core machine


@pytest.fixture(scope="module")
def cluster():
    cluster = cluster_utils.Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0, "include_dashboard": False}
    )
    worker = cluster.add_node(num_cpus=1, num_gpus=1)
    ray.init(address=cluster.address, logging_level="ERROR")
    yield cluster, worker
    ray.shutdown()
    cluster.shutdown()


def test_a_node_that_never_comes_back(cluster, task, fast_config, candidate, tmp_path):
    cluster, worker = cluster
    started = tmp_path / "started"
    source = f"import time\nopen({str(started)!r}, 'w').close()\ntime.sleep(20)\n" + candidate(
        "        return torch.relu(self.lin(x))"
    )
    settings = RayPoolConfig(candidates_per_actor=1, start_timeout_s=START_TIMEOUT_S)
    config = fast_config.model_copy(update={"time": False, "correctness_trials": 1})
    with make_pool(config, PoolConfig(kind="ray", spares=0, ray=settings)) as pool:
        lost = pool.submit(EvalRequest(task, source, "lost"))
        deadline = time.monotonic() + 120
        while not started.exists():  # the candidate is being imported on the worker node
            assert time.monotonic() < deadline, "the candidate never started"
            time.sleep(0.2)
        cluster.remove_node(worker)
        result = lost.result(timeout=120)
        assert pool.actors() == 0  # the replacement never started: nothing is left waiting on it
    assert result.evaluator_error and result.failed_stage is Stage.EVALUATOR
    assert result.environment.pool.attempts == 2
    assert "Ray actor lost" in result.error and "could be started" in result.error
