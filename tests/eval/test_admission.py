"""Admission of evaluations to a device by memory, and what happens when the trusted side fails."""

from __future__ import annotations

import threading
import time

from cudal1.eval.admission import CONTEXTS_BYTES, DeviceAccess, DeviceGate, expected_need
from cudal1.eval.pool import EvalPool, evaluate
from cudal1.schema import EvalRequest, Stage, Task


def _hold(
    gate: DeviceGate, need: float, exclusive: bool, log: list[str], name: str, secs: float
) -> threading.Thread:
    def run() -> None:
        with gate.admit(need, exclusive=exclusive):
            log.append(f"+{name}")
            time.sleep(secs)
            log.append(f"-{name}")

    t = threading.Thread(target=run)
    t.start()
    return t


def test_gate_admits_by_bytes_and_a_retry_gets_the_device_alone():
    gate, log = DeviceGate(10.0), []
    a = _hold(gate, 6, False, log, "a", 0.3)
    time.sleep(0.05)
    b = _hold(gate, 6, False, log, "b", 0.05)  # 6 + 6 > 10: waits for a
    time.sleep(0.05)
    c = _hold(gate, 3, False, log, "c", 0.05)  # fits beside a
    for t in (a, b, c):
        t.join()
    assert log.index("+c") < log.index("-a") < log.index("+b")
    log.clear()
    a = _hold(gate, 1, False, log, "a", 0.2)
    time.sleep(0.05)
    x = _hold(gate, 1, True, log, "x", 0.05)  # exclusive: waits for a, and goes before d
    time.sleep(0.05)
    d = _hold(gate, 1, False, log, "d", 0.05)
    for t in (a, x, d):
        t.join()
    assert log == ["+a", "-a", "+x", "-x", "+d", "-d"]


def test_one_evaluation_is_admitted_whatever_it_needs():
    gate, log = DeviceGate(10.0), []
    _hold(gate, 1e12, False, log, "big", 0.01).join()
    assert log == ["+big", "-big"]


def _checks_then_timing(access: DeviceAccess, log: list[str], name: str, requests: int) -> threading.Thread:
    """One evaluation as the pool runs it: each check request under a shared hold, then the
    timing with the device alone, then a late probe's request."""

    def run() -> None:
        for i in range(requests):
            with access.shared():
                log.append(f"+check {name}{i}")
                time.sleep(0.05)
                log.append(f"-check {name}{i}")
        with access.exclusive():
            log.append(f"+time {name}")
            time.sleep(0.05)
            log.append(f"-time {name}")
        with access.shared():
            log.append(f"probe {name}")

    t = threading.Thread(target=run)
    t.start()
    return t


def test_checks_share_the_device_and_a_timing_has_it_alone():
    access, log = DeviceAccess(), []
    threads = [_checks_then_timing(access, log, name, n) for name, n in (("a", 6), ("b", 1), ("c", 3))]
    for t in threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in threads)
    # The first requests overlapped: all three began before the first ended.
    assert max(log.index(f"+check {n}0") for n in "abc") < min(log.index(f"-check {n}0") for n in "abc")
    # Each timing ran alone: nothing else happened between its start and its end.
    for n in "abc":
        start = log.index(f"+time {n}")
        assert log[start + 1] == f"-time {n}"
    # b's timing waited for the requests under way, not for a's and c's checks to end.
    assert log.index("+time b") < log.index("-check a5") and log.index("+time b") < log.index("-check c2")


def test_a_waiting_timing_goes_before_checks_that_arrive_after_it():
    access, log = DeviceAccess(), []

    def hold(kind: str, name: str, secs: float) -> threading.Thread:
        def run() -> None:
            with access.shared() if kind == "check" else access.exclusive():
                log.append(f"+{name}")
                time.sleep(secs)
                log.append(f"-{name}")

        t = threading.Thread(target=run)
        t.start()
        return t

    a = hold("check", "a", 0.2)
    time.sleep(0.05)
    x = hold("time", "x", 0.05)
    time.sleep(0.05)
    d = hold("check", "d", 0.05)
    for t in (a, x, d):
        t.join()
    assert log == ["+a", "-a", "+x", "-x", "+d", "-d"]


def test_need_follows_the_reference_peak():
    assert expected_need(None, 80e9, 4) == 20e9
    assert expected_need(3 * 2**30, 80e9, 4) == 6 * 2**30 + CONTEXTS_BYTES


OOM_ONCE = """
import torch
import torch.nn as nn

_calls = [0]


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        _calls[0] += x.dtype == torch.float32  # the float64 and low-precision twins do not count
        if _calls[0] == {when}:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return self.lin(x)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
"""

CANDIDATE = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(x)
"""


def test_an_out_of_memory_reference_is_retried_and_never_the_candidates(fast_config):
    once = Task("oom_once", OOM_ONCE.replace("{when}", "2"))
    result = evaluate(once, CANDIDATE, fast_config)
    assert result.ok, result.error
    assert "OutOfMemoryError" in result.environment.retried_after


def test_a_trusted_side_that_keeps_failing_is_an_evaluator_error(fast_config):
    always = Task("oom_always", OOM_ONCE.replace("_calls[0] == {when}", "_calls[0] >= 1"))
    with EvalPool(fast_config, workers=1, spares=0) as pool:
        result = pool.evaluate(always, CANDIDATE)
    assert result.evaluator_error and result.failed_stage is Stage.EVALUATOR
    assert not result.correct and not result.rejected and result.speedup is None
    assert result.environment.retried_after is not None


SLOW_CHECKS = """
import time
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        time.sleep(0.15)
        return torch.relu(self.lin(x))
"""


def _most_on_device(fast_config, task, shared: bool) -> int:
    """The most evaluations a two-worker pool had on the device at once, checking two tasks'
    slow candidates (correctness only)."""
    config = fast_config.model_copy(update={"shared_checks": shared, "time": False, "first_calls": 0})
    other = Task("gemm_relu_2", task.source + "\n# another task: its own reference worker\n", level=1)
    most, done = 0, threading.Event()
    with EvalPool(config, workers=2, spares=0) as pool:

        def watch() -> None:
            nonlocal most
            while not done.is_set():
                most = max(most, pool.activity()["on_device"])
                time.sleep(0.01)

        watcher = threading.Thread(target=watch)
        watcher.start()
        results = [
            r
            for _, r in pool.evaluate_many([EvalRequest(task, SLOW_CHECKS), EvalRequest(other, SLOW_CHECKS)])
        ]
        done.set()
        watcher.join()
    assert all(r.correct for r in results), [r.error for r in results]
    return most


def test_a_pools_checks_share_the_device_unless_configured_not_to(fast_config, task):
    assert _most_on_device(fast_config, task, shared=True) == 2
    assert _most_on_device(fast_config, task, shared=False) == 1
