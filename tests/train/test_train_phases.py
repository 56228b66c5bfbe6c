"""Sharing a device: a training step (and the generation inside it) waits while the pool times
a batch; with evaluation devices of its own, nothing waits."""

from __future__ import annotations

import threading

from cudal1.train.grpo import shares_device
from cudal1.train.phases import PhaseCallback, PhaseGate


def test_a_step_waits_for_the_batch_being_timed() -> None:
    released: list[int] = []
    gate = PhaseGate(shared=True, release=lambda: released.append(1))
    timing, finish, order = threading.Event(), threading.Event(), []

    def evaluate() -> None:
        with gate.evaluating():
            timing.set()
            finish.wait()
            order.append("timed")

    evaluator = threading.Thread(target=evaluate)
    evaluator.start()
    timing.wait()
    step = threading.Thread(
        target=lambda: (PhaseCallback(gate).on_step_begin(None, None, None), order.append("step"))
    )
    step.start()
    step.join(0.3)
    assert step.is_alive() and order == []  # blocked while the pool holds the device
    finish.set()
    evaluator.join()
    step.join()
    assert order == ["timed", "step"] and gate.waits == 1 and released == [1] and not gate.busy


def test_separate_devices_never_wait_or_release() -> None:
    def fail() -> None:
        raise AssertionError("released a device the pool does not use")

    gate = PhaseGate(shared=False, release=fail)
    with gate.evaluating():
        gate.wait_idle()  # returns at once
    assert gate.waits == 0


def test_shared_when_the_training_device_is_an_evaluation_device() -> None:
    assert shares_device("cpu", ["cpu"])
    assert not shares_device("cpu", ["cuda:1"])
    assert not shares_device("cuda:0", ["cuda:1", "cuda:2"])
    assert shares_device("cuda:1", ["cuda:0", "cuda:1"])


def test_the_pool_admits_around_the_memory_the_policy_keeps() -> None:
    """At each release the gate tells the pool what the policy still holds; the pool's admission
    capacity on that device shrinks by it (and grows back when it shrinks)."""
    from cudal1.config import EvalConfig
    from cudal1.eval.admission import USABLE
    from cudal1.eval.pool import EvalPool
    from cudal1.train.grpo import _reserver

    with EvalPool(EvalConfig(device="cpu"), workers=1, spares=0) as pool:
        pool._totals["cpu"] = 100 * 2**30  # as a reference worker reports a device's memory
        held = [30 * 2**30]
        gate = PhaseGate(shared=True, release=lambda: None, reserve=_reserver(pool, "cpu"), held=lambda: held[0])
        with gate.evaluating():
            assert pool._capacity("cpu") == USABLE * 100 * 2**30 - 30 * 2**30
        held[0] = 10 * 2**30
        with gate.evaluating():
            assert pool._capacity("cpu") == USABLE * 100 * 2**30 - 10 * 2**30
    assert _reserver(pool, "cuda:3") is None  # the policy's device is not the pool's
