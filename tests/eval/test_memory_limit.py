"""A candidate's worker holds at most its memory limit: past it, the candidate fails at its stage
with "memory limit exceeded" (not a random death by the kernel's OOM killer), whether the
allocation is refused in the worker (RLIMIT_DATA) or the trusted side sees the worker hold too
much (shared memory, which RLIMIT_DATA does not count). With none configured, a pool sizes the
limit from the machine."""

from __future__ import annotations

import pytest

from cudal1.config import EvalConfig
from cudal1.eval.pool import EvalPool, evaluate
from cudal1.eval.workers import MEMORY_SHARE, machine_memory_bytes, with_memory_limit
from cudal1.schema import Stage

LIMIT_GB = 1.0  # a CPU worker holds about 0.15 GB at rest and its data segment is about 0.25 GB


def _capped(config: EvalConfig, gb: float = LIMIT_GB) -> EvalConfig:
    """``gb`` as the limit; and room for a worker's start on a loaded machine (60 s)."""
    sandbox = config.sandbox.model_copy(update={"memory_limit_gb": gb, "call_timeout_s": 60})
    return config.model_copy(update={"sandbox": sandbox})


def test_an_allocation_past_the_limit_fails_the_candidate_at_its_stage(task, fast_config, candidate):
    source = candidate(
        "        return torch.relu(self.lin(x))",
        init_extra="        self.hoard = torch.ones(2 * 2**30 // 4)\n",
    )
    result = evaluate(task, source, _capped(fast_config))
    assert result.failed_stage is Stage.LOAD
    assert result.error.startswith(
        "memory limit exceeded: an allocation failed at the candidate's limit of 1.00 GB"
    )
    assert not result.evaluator_error


def test_shared_memory_past_the_limit_is_caught_by_the_trusted_side(task, fast_config, candidate):
    """Shared mappings are not counted by RLIMIT_DATA: the watch from outside kills the worker."""
    hoard = (
        "        import mmap\n"
        "        self.hoard = mmap.mmap(-1, 4 * 2**30)\n"
        "        for _ in range(4 * 2**10):\n"
        "            self.hoard.write(b'x' * 2**20)\n"
    )
    source = candidate("        return torch.relu(self.lin(x))", init_extra=hoard)
    result = evaluate(task, source, _capped(fast_config))
    assert result.failed_stage is Stage.LOAD
    assert result.error.startswith("memory limit exceeded: the candidate's process held")
    assert "more than its limit of 1.00 GB (sandbox.memory_limit_gb)" in result.error


def test_a_candidate_under_the_limit_passes(task, fast_config, candidate):
    result = evaluate(task, candidate("        return torch.relu(self.lin(x))"), _capped(fast_config))
    assert result.ok, result.error


def test_the_default_limit_is_the_machines_share_per_candidate_worker(fast_config):
    assert fast_config.sandbox.memory_limit_gb is None
    with EvalPool(fast_config, workers=2, spares=0) as pool:
        limit = pool.config.sandbox.memory_limit_gb
    assert limit == pytest.approx(max(2.0, MEMORY_SHARE * machine_memory_bytes() / 2 / 2**30), abs=0.05)
    assert with_memory_limit(_capped(fast_config, 0), 3).sandbox.memory_limit_gb == 0  # 0: no cap, as asked
    assert with_memory_limit(_capped(fast_config, 5.5), 3).sandbox.memory_limit_gb == 5.5
