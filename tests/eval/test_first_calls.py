"""The candidate's first calls: made before the device is taken, on inputs no checked or timed call
sees, stopped by the quiet windows, recorded as their own phase, and failing at the load stage.
A task's reference hands out constant init inputs without its lock."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from cudal1.eval.pool import EvalPool, evaluate
from cudal1.eval.workers import ReferenceWorker
from cudal1.run.selection import why_not_ok
from cudal1.schema import UNHELD_PHASES, EvalRequest, Stage, Task

RIGHT = "        return torch.relu(self.lin(x))"


@pytest.fixture
def fast_config(fast_config):
    """No test here waits for a timeout: room for worker start-up on a loaded machine."""
    return fast_config.model_copy(
        update={
            "sandbox": fast_config.sandbox.model_copy(
                update={"call_timeout_s": 60, "first_calls_timeout_s": 60}
            )
        }
    )


def _logging_candidate(candidate, log: Path) -> str:
    """A right candidate that appends the sum of every input it is called on to ``log``."""
    body = f"        with open({str(log)!r}, 'a') as f:\n            f.write(repr(float(x.sum())) + '\\n')\n{RIGHT}"
    return candidate(body)


def _slow_first_call(candidate, seconds: float) -> str:  # type: ignore[no-untyped-def]
    """A right candidate whose first call in its process builds for ``seconds`` (as torch.compile
    does; later models, such as the re-drawn weights' probe, find the build done)."""
    lazy = [
        "        if not globals().get('BUILT'):",
        f"            time.sleep({seconds})",
        "            globals()['BUILT'] = True",
        RIGHT,
    ]
    return "import time\n" + candidate("\n".join(lazy))


def test_first_calls_see_inputs_that_no_checked_or_timed_call_sees(task, fast_config, candidate, tmp_path):
    log = tmp_path / "calls.log"
    result = evaluate(task, _logging_candidate(candidate, log), fast_config)
    assert result.ok, result.error
    calls = log.read_text().split()
    first, later = calls[: fast_config.first_calls], calls[fast_config.first_calls :]
    assert len(set(first)) == 1  # the same inputs, called twice
    assert later and first[0] not in later  # checked, probe and timed calls never get them
    assert "first_calls" in UNHELD_PHASES and result.environment.device_s["first_calls"] > 0
    assert [s.stage for s in result.stages][:4] == [
        Stage.STATIC,
        Stage.COMPILE,
        Stage.LOAD,
        Stage.CORRECTNESS,
    ]


def test_a_slow_first_call_neither_holds_the_device_nor_runs_while_a_pair_is_sampled(
    task, fast_config, candidate
):
    """A candidate whose first call builds for seconds (as torch.compile does) reaches the device
    first but is timed second; while the other pair is sampled it stands still (it is loading)."""
    sources = {
        "slow_first_call": _slow_first_call(candidate, 6),
        "slow_import": "import time\ntime.sleep(1)\n" + candidate(RIGHT),
    }
    with EvalPool(fast_config, workers=2, spares=0) as pool:  # no spare starting beside them
        done = list(pool.evaluate_many(EvalRequest(task, s, k) for k, s in sources.items()))
    results = {req.request_id: res for req, res in done}
    assert all(r.ok for r in results.values()), {k: r.error for k, r in results.items()}
    assert [req.request_id for req, _ in done] == ["slow_import", "slow_first_call"]
    assert results["slow_import"].environment.workers_paused_while_timed == 1
    assert results["slow_first_call"].environment.device_s["first_calls"] >= 6


CONSTANT_INIT = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n, scale):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.scale = scale

    def forward(self, x):
        return self.lin(x) * self.scale


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return [8, INIT]
"""


def _reference(source: str, fast_config) -> ReferenceWorker:
    ref = ReferenceWorker(Task("init", source), fast_config, "cpu")
    with ref.lock:
        ref.ensure_loaded()
    return ref


def _args_while_locked(ref: ReferenceWorker, seed: int, wait_s: float = 30) -> list | None:
    """``init_args`` from another thread while this one holds the reference's lock; None when it
    waited for the lock (then it gets it once the lock goes)."""
    got: list = []
    with ref.lock:
        thread = threading.Thread(target=lambda: got.append(ref.init_args(seed)), daemon=True)
        thread.start()
        thread.join(wait_s)
        waited = thread.is_alive()
    thread.join()
    return None if waited else got[0]


@pytest.mark.parametrize(("first_calls_s", "ok"), [(12, True), (2, False)])
def test_first_calls_get_their_own_time_limit_and_its_failure_says_so(
    task, fast_config, candidate, first_calls_s, ok
):
    """A build at the first call (4 s here) longer than one call's limit (3 s) passes where the
    first calls' limit allows it: max-autotune builds under a loaded H100 took over 120 s and were
    failed. Past that limit the one line a run prints names the time limit, not the last line
    the worker logged (an autotuning table)."""
    sandbox = fast_config.sandbox.model_copy(
        update={"call_timeout_s": 3, "first_calls_timeout_s": first_calls_s}
    )
    result = evaluate(
        task, _slow_first_call(candidate, 4), fast_config.model_copy(update={"sandbox": sandbox})
    )
    if ok:
        assert result.ok, result.error
        return
    assert result.failed_stage is Stage.LOAD
    assert (
        why_not_ok(result)
        == f"load stage: candidate worker timed out after {first_calls_s}s during first_calls"
    )


def test_constant_init_inputs_are_served_without_the_reference_lock(fast_config):
    ref = _reference(CONSTANT_INIT.replace("INIT", "0.5"), fast_config)
    try:
        assert ref.init_args(1) == [8, 0.5]  # asked twice under two seeds: the same plain values
        assert _args_while_locked(ref, 2) == [8, 0.5]
    finally:
        ref.close()


def test_init_inputs_that_vary_with_the_seed_are_asked_every_time(fast_config):
    ref = _reference(CONSTANT_INIT.replace("INIT", "float(torch.rand(()))"), fast_config)
    try:
        first, second = ref.init_args(1), ref.init_args(2)
        assert first[1] != second[1] and ref.init_args(1) == first
        assert _args_while_locked(ref, 3, wait_s=1) is None  # it cannot finish without the lock
    finally:
        ref.close()
