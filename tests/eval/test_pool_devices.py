"""A local pool over several devices, exercised on CPU: torch takes ``cpu:0`` and ``cpu:1`` as
two names of the one CPU, which is enough for the pool's per-device machinery (a lock, a memory
gate and reference workers per name, least-loaded assignment) to run as it does over GPUs."""

from __future__ import annotations

import pytest
import torch

from cudal1.eval.pool import EvalPool
from cudal1.eval.process.protocol import Command, Role
from cudal1.eval.process.sandbox import WorkerProcess
from cudal1.schema import EvalRequest, Severity

RIGHT = "        return torch.relu(self.lin(x))  # variant {i}"


def test_two_devices_share_the_work_and_say_so(task, fast_config, candidate):
    config = fast_config.model_copy(update={"time": False})
    requests = [EvalRequest(task, candidate(RIGHT.format(i=i)), str(i)) for i in range(4)]
    with EvalPool(config, spares=0, devices=["cpu:0", "cpu:1"]) as pool:
        assert pool.capacity == 4  # two workers per device by default
        results = dict(pool.evaluate_many(requests))
        counts = pool.device_counts()
    assert all(r.correct for r in results.values()), [r.error for r in results.values()]
    assert {r.device for r in results.values()} == {"cpu:0", "cpu:1"}
    assert sum(counts.values()) == 4 and min(counts.values()) >= 1
    for result in results.values():
        assert result.environment.pool.kind == "local"
        assert result.environment.pool.devices == 2
        assert sum(result.environment.pool.device_counts.values()) <= 4


def test_a_candidates_worker_loads_its_task_on_the_device_it_is_timed_on(
    task, fast_config, candidate, monkeypatch
):
    """The device is chosen before the candidate's worker loads the task: its LOAD_TASK names
    the device its result is checked and timed on, so whatever it makes at import, its lead and
    its state as found are there (loaded on the first and timed on the second GPU, the lead
    prepared again read as the candidate's change on two H200s)."""
    loads: dict[int, str] = {}  # candidate worker pid -> the device its LOAD_TASK named
    builds: dict[int, set[str]] = {}  # ... and those its BUILDs (the checked and timed models) named
    request = WorkerProcess.request

    def watched(self, cmd, timeout=None, **args):
        if self.role is Role.CANDIDATE and cmd is Command.LOAD_TASK:
            loads[self.proc.pid] = args["device"]
        if self.role is Role.CANDIDATE and cmd is Command.BUILD:
            builds.setdefault(self.proc.pid, set()).add(args["device"])
        return request(self, cmd, timeout, **args)

    monkeypatch.setattr(WorkerProcess, "request", watched)
    config = fast_config.model_copy(update={"time": False})
    requests = [EvalRequest(task, candidate(RIGHT.format(i=i)), str(i)) for i in range(6)]
    with EvalPool(config, spares=0, devices=["cpu:0", "cpu:1"]) as pool:
        results = dict(pool.evaluate_many(requests))
    assert all(r.correct for r in results.values()), [r.error for r in results.values()]
    assert {r.device for r in results.values()} == {"cpu:0", "cpu:1"}
    assert len(loads) == 6 and builds.keys() == loads.keys()
    assert all(builds[pid] == {device} for pid, device in loads.items()), (loads, builds)


def test_a_device_named_twice_is_an_error(fast_config):
    with pytest.raises(ValueError, match="once"):
        EvalPool(fast_config, devices=["cpu:0", "cpu:0"])


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two CUDA GPUs"
)
def test_honest_candidates_timed_on_either_gpu_are_verified(task, fast_config, candidate):
    """Over two GPUs, honest candidates timed on either are verified: nothing the trusted side
    does on the second GPU may read as the candidate's doing (on two H200s, with the GPU assigned
    after the worker had loaded its task on the first, the lead prepared again on the second was
    'lead settings' changed: timer_tampered)."""
    config = fast_config.model_copy(
        update={
            "device": "cuda",
            "timing": fast_config.timing.model_copy(update={"budget_s": 1.0}),
            "sandbox": fast_config.sandbox.model_copy(
                update={"call_timeout_s": 120, "first_calls_timeout_s": 300, "import_timeout_s": 600}
            ),
        }
    )
    # One request a worker (two a GPU): a lane of 130 s did not see six through (two H200s).
    requests = [EvalRequest(task, candidate(RIGHT.format(i=i)), str(i)) for i in range(4)]
    with EvalPool(config, spares=0, devices=["cuda:0", "cuda:1"]) as pool:
        results = dict(pool.evaluate_many(requests))
    assert {r.device for r in results.values()} == {"cuda:0", "cuda:1"}
    for result in results.values():
        rejects = [f.code for f in result.findings if f.severity is Severity.REJECT]
        assert result.ok and not rejects, (result.device, rejects, result.error)
