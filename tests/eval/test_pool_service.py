"""The evaluator service: one pool in its own process, submitted to by clients of several
processes; a wrong key is turned away, and a service that stops fails what waits as stopped."""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
from concurrent.futures import ThreadPoolExecutor

import pytest

from cudal1.config import EvalConfig, PoolConfig, SandboxConfig, TimingConfig
from cudal1.eval.pool import PoolStopped
from cudal1.eval.pool_service import PoolService, PoolServiceError, RemotePool, ServiceAddress
from cudal1.schema import EvalRequest

HONEST = "        return torch.relu(self.lin(x))\n"
WRONG = "        return self.lin(x)\n"


def _submit_from_another_process(address: ServiceAddress, request: EvalRequest, out) -> None:
    with RemotePool(address) as pool:
        result = pool.submit(request).result(timeout=120)
    out.put((result.correct, result.rejected))


@pytest.fixture(scope="module")
def shared_config(tmp_path_factory):
    return EvalConfig(
        device="cpu",
        correctness_trials=3,
        build_cache=tmp_path_factory.mktemp("builds"),
        timing=TimingConfig(warmup_ms=2, min_samples=5, max_samples=8, budget_s=1, bootstrap_resamples=200),
        sandbox=SandboxConfig(call_timeout_s=8, import_timeout_s=60),
    )


@pytest.fixture(scope="module")
def service(shared_config):
    """One service for the tests that leave it running (a service takes seconds to start)."""
    with PoolService.start(shared_config, PoolConfig(workers=2, spares=0, devices=("cpu",))) as svc:
        yield svc


@pytest.fixture
def own_service(shared_config):
    with PoolService.start(shared_config, PoolConfig(workers=1, spares=0, devices=("cpu",))) as svc:
        yield svc


def test_clients_in_two_processes_share_one_pool_and_get_their_own_verdicts(service, task, candidate):
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    other = ctx.Process(
        target=_submit_from_another_process,
        args=(service.address, EvalRequest(task, candidate(WRONG)), results),
    )
    other.start()
    with RemotePool(service.address) as pool:
        assert pool.devices == ("cpu",) and pool.capacity == 2
        mine = pool.submit(EvalRequest(task, candidate(HONEST))).result(timeout=120)
        assert pool.in_flight() == 0
    other.join(120)
    assert other.exitcode == 0
    assert mine.correct and not mine.rejected and mine.timing is not None
    assert results.get(timeout=5) == (False, False)  # the other process's wrong candidate


def test_many_requests_from_threads_each_get_their_own_result(service, task, candidate):
    sources = [candidate(HONEST), candidate(WRONG), candidate(HONEST + "  # twin\n")]
    with RemotePool(service.address) as pool, ThreadPoolExecutor(3) as threads:
        futures = list(threads.map(lambda s: pool.submit(EvalRequest(task, s)), sources))
        verdicts = [f.result(timeout=180).correct for f in futures]
    assert verdicts == [True, False, True]


def test_a_client_with_the_wrong_key_is_turned_away(service):
    forged = dataclasses.replace(service.address, key=b"x" * 32)
    with pytest.raises(PoolServiceError, match="cannot reach"):
        RemotePool(forged)
    assert "key" not in repr(service.address).lower().replace("serviceaddress", "")


def test_a_stop_ends_every_wait_then_refuses_more(shared_config, task, candidate):
    """What the service read finishes before it stops (the pool's close); a request still in the
    socket when it stops ends as stopped. Either way nothing waits for ever."""
    svc = PoolService.start(shared_config, PoolConfig(workers=1, spares=0, devices=("cpu",)))
    pool = RemotePool(svc.address)
    future = pool.submit(EvalRequest(task, candidate(HONEST)))
    svc.stop()
    with contextlib.suppress(PoolStopped):
        assert future.result(timeout=5).correct
    pool._reader.join(10)  # the service's end reaches the client as an end of file
    with pytest.raises(PoolStopped):
        pool.submit(EvalRequest(task, candidate(HONEST)))
    pool.close()


def test_a_malformed_message_ends_only_that_client(service, task, candidate):
    from multiprocessing.connection import Client

    rogue = Client((service.address.host, service.address.port), authkey=service.address.key)
    rogue.recv_bytes()  # the hello
    rogue.send_bytes(b"\x80\x04not json")  # a pickle's opening bytes: never unpickled
    with pytest.raises(EOFError):
        rogue.recv_bytes()
    with RemotePool(service.address) as pool:  # the service serves the others on
        assert pool.submit(EvalRequest(task, candidate(HONEST))).result(timeout=120).correct


def test_a_service_that_dies_fails_what_waits_as_stopped(own_service, task, candidate):
    slow = candidate(HONEST, imports="import time", init_extra="        time.sleep(60)\n")
    with RemotePool(own_service.address) as pool:
        future = pool.submit(EvalRequest(task, slow))
        own_service._process.kill()
        with pytest.raises(PoolStopped, match="went away"):
            future.result(timeout=30)


def test_a_pool_that_cannot_be_made_is_a_clear_error(fast_config):
    # Past the config's validation (a workers count the pool cannot take), as a broken cluster
    # or device would fail the pool's start: the starter hears why.
    broken = PoolConfig.model_construct(**{**PoolConfig(spares=0).model_dump(), "workers": -1})
    with pytest.raises(PoolServiceError, match="could not start its pool: ValueError"):
        PoolService.start(fast_config, broken)
