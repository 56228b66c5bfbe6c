"""A pool left by an exception (Ctrl-C included) stops what is under way at once: the candidate
workers of running evaluations are killed, one stopped (SIGSTOP, as a quiet window does) too,
their evaluations end in ``PoolStopped`` (no verdict on the candidate), and nothing is left
running. A reply that is slow in coming says so in the log while it is awaited."""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

import pytest

from cudal1.eval.pool import EvalPool, PoolStopped
from cudal1.eval.process import sandbox
from cudal1.schema import EvalRequest, Stage


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def _wait_for(condition, seconds: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return bool(condition())


def _sleeper(candidate, pid_file: Path, seconds: int) -> str:  # type: ignore[no-untyped-def]
    """A ModelNew whose __init__ writes its process id to ``pid_file`` and then sleeps."""
    init = (
        f"        open({str(pid_file)!r}, 'w').write(str(__import__('os').getpid()))\n"
        f"        __import__('time').sleep({seconds})\n"
    )
    return candidate("        return torch.relu(self.lin(x))", init_extra=init)


def test_an_exception_in_the_pools_block_kills_its_stopped_worker(task, fast_config, candidate, tmp_path):
    pid_file = tmp_path / "pid"
    cfg = fast_config.model_copy(
        update={"sandbox": fast_config.sandbox.model_copy(update={"call_timeout_s": 300})}
    )
    pool = EvalPool(cfg, workers=1, spares=1)
    with pytest.raises(KeyboardInterrupt), pool:  # noqa: PT012
        future = pool.submit(EvalRequest(task, _sleeper(candidate, pid_file, 600), label="sleeper"))
        assert _wait_for(pid_file.exists, 120), "the candidate's __init__ never ran"
        pid = int(pid_file.read_text())
        assert pool.in_flight() == 1
        os.killpg(pid, signal.SIGSTOP)  # as a quiet window stops a loading worker
        raise KeyboardInterrupt
    # The evaluation would have held its worker for 600 s (its call limit 300 s): the pool did
    # not wait for it, and the stopped worker is gone.
    assert _wait_for(lambda: not _running(pid), 30), "the stopped worker outlived its pool"
    with pytest.raises(PoolStopped):
        future.result(timeout=30)
    assert pool.in_flight() == 0


def test_a_long_wait_for_a_reply_is_logged_while_it_lasts(
    task, fast_config, candidate, tmp_path, monkeypatch, caplog
):
    monkeypatch.setattr(sandbox, "STILL_WAITING_S", 1.0)
    cfg = fast_config.model_copy(
        update={"sandbox": fast_config.sandbox.model_copy(update={"call_timeout_s": 30})}
    )
    with caplog.at_level(logging.WARNING, logger="cudal1"), EvalPool(cfg, workers=1, spares=0) as pool:
        request = EvalRequest(task, _sleeper(candidate, tmp_path / "pid", 60), label="sleeper")
        result = pool.submit(request).result()
    assert result.failed_stage is Stage.LOAD and "timed out after 30s" in result.error
    waits = [r.getMessage() for r in caplog.records if r.getMessage().startswith("still waiting")]
    assert "still waiting: gemm_relu sleeper in load for 1 s (limit 30 s)" in waits
    assert any(line.startswith("still waiting: gemm_relu sleeper in load for 3 s") for line in waits)
