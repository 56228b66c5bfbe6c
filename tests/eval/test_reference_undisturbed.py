"""The reference timed undisturbed, with real workers (issue 21, item 6).

CPU: a candidate whose thread burns the CPU whenever it is not being called (started at import
with ``_thread``, which the thread watch does not see) gets no CPU time while the reference is
timed: its process group is stopped for every reference turn. GPU (``-m gpu``): a candidate that
leaves GPU work queued behind each of its timed requests is ``reference_disturbed``, on the
reference's times alone: the timer guard also names the wrapper this one queues its work from,
and the test has the trusted side pass over that.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from candidate_fixtures import SCALE_SHIFT_TASK

from cudal1.config import EvalConfig, SandboxConfig, TimingConfig
from cudal1.eval import timing_stage
from cudal1.eval.checks.interference import SLOWDOWN_MARGIN
from cudal1.eval.pool import evaluate
from cudal1.eval.process.protocol import Role
from cudal1.eval.process.sandbox import WorkerProcess
from cudal1.eval.workers import WorkerEndpoint
from cudal1.schema import EvalResult, Severity, Task

# Burns a core (hashing releases the GIL, so the candidate's own calls do not wait for it) except
# within 1 ms of a forward call: it takes the CPU from whatever runs beside the candidate's idle
# worker, which in the timing is the reference.
SPIN_WHEN_IDLE = """import _thread
import hashlib
import time

LAST_CALL = [0.0]


def _spin():
    data = b"x" * (1 << 18)
    while True:
        if time.perf_counter() - LAST_CALL[0] > 0.001:
            hashlib.sha256(data).digest()
        else:
            time.sleep(0.0002)


_thread.start_new_thread(_spin, ())
"""


def cpu_ns(pid: int) -> int:
    """Nanoseconds on a CPU so far, all threads of process ``pid`` (the scheduler's own count)."""
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        with contextlib.suppress(OSError, ValueError, IndexError):  # a thread that ended meanwhile
            total += int(stat.read_text().split()[0])
    return total


def wait_stopped(pid: int, timeout_s: float = 2.0) -> None:
    """Until every thread of ``pid`` is stopped. A running thread's count is brought up to date
    only at a tick or when it stops (up to 4 ms late here), so it is read once stopped. (A
    sleeping thread reaches the stopped state only when next scheduled, ~10 ms on this loaded
    machine, but runs none of its code on the way.)"""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        states = []
        for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
            with contextlib.suppress(OSError, IndexError):
                states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
        if states and all(s in "Tt" for s in states):
            return
    raise AssertionError(f"the candidate's threads did not stop within {timeout_s} s")


class CandidateWatch:
    """An ``Endpoint`` factory for the timing stage that records, for each turn of the reference
    (from its prepare to its timed reply), how much CPU time the candidate's process got."""

    def __init__(self) -> None:
        self.candidate_pid = 0
        self.paused = True  # whether the timing stops the candidate (the control says not)
        self.during_reference: list[int] = []
        self.total = 0

    def __call__(self, process: WorkerProcess) -> WorkerEndpoint:
        watch = self

        class Watched(WorkerEndpoint):
            def prepare(self) -> None:
                if self.process.role is Role.REFERENCE:
                    if watch.paused:
                        wait_stopped(watch.candidate_pid)
                    self._start = cpu_ns(watch.candidate_pid)
                super().prepare()

            def finish(self) -> float:
                ms = super().finish()
                if self.process.role is Role.REFERENCE:
                    watch.during_reference.append(cpu_ns(watch.candidate_pid) - self._start)
                return ms

        if process.role is Role.CANDIDATE:
            self.candidate_pid = process.proc.pid
            self.total = -cpu_ns(process.proc.pid)
        return Watched(process)


def _evaluate_watched(
    monkeypatch: pytest.MonkeyPatch, task: Task, source: str, config: EvalConfig, paused: bool = True
) -> tuple[EvalResult, CandidateWatch]:
    watch = CandidateWatch()
    watch.paused = paused
    monkeypatch.setattr(timing_stage, "WorkerEndpoint", watch)
    original = timing_stage.measure_paired

    def measure(*args, **kwargs):  # the candidate's CPU time over the whole sampling, too
        try:
            return original(*args, **kwargs)
        finally:
            watch.total += cpu_ns(watch.candidate_pid)

    monkeypatch.setattr(timing_stage, "measure_paired", measure)
    return evaluate(task, source, config), watch


def _config(tmp_path: Path) -> EvalConfig:
    return EvalConfig(
        device="cpu",
        correctness_trials=3,
        build_cache=tmp_path / "builds",
        timing=TimingConfig(warmup_ms=2, min_samples=30, max_samples=40, budget_s=3, bootstrap_resamples=200),
        sandbox=SandboxConfig(call_timeout_s=30, import_timeout_s=120),
    )


def test_a_thread_burning_the_cpu_when_idle_gets_none_while_the_reference_runs(
    monkeypatch: pytest.MonkeyPatch, task: Task, candidate: Callable[..., str], tmp_path: Path
) -> None:
    """Stopped, the spinner gets no CPU in any reference turn (SIGSTOP takes effect within
    microseconds); it ran the rest of the time. The candidate's verdict then rests on the
    findings that exist: the unjoined ``_thread`` is a static warning (``thread_or_stream``),
    the thread watch cannot see it, and nothing of the reference's time is disturbed."""
    source = candidate(
        "        LAST_CALL[0] = time.perf_counter()\n        return torch.relu(self.lin(x))",
        imports=SPIN_WHEN_IDLE,
    )
    result, watch = _evaluate_watched(monkeypatch, task, source, _config(tmp_path))
    assert result.timing is not None, result.error
    turns = len(result.timing.ref_ms)
    assert len(watch.during_reference) >= turns >= 30
    assert watch.total > 200e6  # it burned at least 0.2 s while the pair was sampled...
    assert sum(watch.during_reference) == 0  # ...and none of it in the reference's turns
    codes = {f.code: f.severity for f in result.findings}
    assert codes.get("thread_or_stream") is Severity.WARNING
    assert "reference_disturbed" not in codes and "threads_left_running" not in codes
    assert result.ok, (result.error, codes)


def test_without_the_pause_the_same_thread_runs_beside_the_reference(
    monkeypatch: pytest.MonkeyPatch, task: Task, candidate: Callable[..., str], tmp_path: Path
) -> None:
    """The control of the test above: the measurement sees the spinner when it is not stopped."""
    monkeypatch.setattr(WorkerEndpoint, "pause", lambda self: True)
    monkeypatch.setattr(WorkerEndpoint, "resume", lambda self: None)
    source = candidate(
        "        LAST_CALL[0] = time.perf_counter()\n        return torch.relu(self.lin(x))",
        imports=SPIN_WHEN_IDLE,
    )
    _, watch = _evaluate_watched(monkeypatch, task, source, _config(tmp_path), paused=False)
    assert sum(watch.during_reference) > 20e6


# The task's own computation, plus GPU work left behind at the end of each timed request: in a
# timed call (the worker turns the collector off then) it arms a one-shot wrapper of the socket's
# send, which queues a spin on a side stream right before the reply goes out, after the worker's
# device-wide synchronize, so that neither clock of the candidate's sees it. It lasts 1.5 x the
# request (lead and calls), about one turn of the reference; the candidate's own next prepare
# waits for it when its own turn comes next. The wrapper removes itself, but it is still in place
# when the worker lists the changed timing objects for the reply, so the timer guard names it
# (``Connection.send_bytes``: ``timer_tampered``, the stronger catch). The test has the trusted
# side pass over the guard's names for the socket (``_wire_unwatched``), so that the reference's
# times alone must show the work left behind. LEAVE = 0: the honest twin, the same wrapper with
# nothing queued.
LEAVE_WORK_BEHIND = """
import gc
import time
from multiprocessing.connection import Connection

import torch
import torch.nn as nn

LEAVE = {leave}
_send = Connection.send_bytes
_state = {{"first_timed": None, "cycles_per_ms": None, "stream": None}}


def _calibrate():
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    torch.cuda._sleep(1_000_000)
    end.record()
    end.synchronize()
    _state["cycles_per_ms"] = 1_000_000 / begin.elapsed_time(end)
    _state["stream"] = torch.cuda.Stream()


def _reply_then_leave(conn, *args, **kwargs):
    Connection.send_bytes = _send
    ms = LEAVE * (time.perf_counter() - _state["first_timed"]) * 1000
    _state["first_timed"] = None
    if ms > 0:
        with torch.cuda.stream(_state["stream"]):
            torch.cuda._sleep(int(ms * _state["cycles_per_ms"]))
    return _send(conn, *args, **kwargs)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if _state["cycles_per_ms"] is None:
            _calibrate()
        if not gc.isenabled() and _state["first_timed"] is None:
            _state["first_timed"] = time.perf_counter()
            Connection.send_bytes = _reply_then_leave
        return torch.relu(x * 2.0 + 1.0)
"""


# What the timer guard names the socket's class methods by (``timer_guard._timers``).
WIRE = "Connection."


def _wire_unwatched(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The timer guard's watch of the socket off, on the trusted side (no config switch turns it
    off, nor should one): the timing stage passes over the guard's names for the socket's
    ``Connection`` methods, and keeps the rest. Returns what the guard reported, names for the
    socket included, once the sampling is done."""
    reported: list[str] = []
    original = timing_stage.measure_paired

    def measure(*args, **kwargs):
        outcome = original(*args, **kwargs)
        reported.extend(outcome.tampered)
        outcome.tampered = [name for name in outcome.tampered if not name.startswith(WIRE)]
        return outcome

    monkeypatch.setattr(timing_stage, "measure_paired", measure)
    return reported


@pytest.mark.gpu
@pytest.mark.parametrize("leave", [1.5, 0.0])
def test_gpu_work_left_behind_each_timed_request_is_reference_disturbed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, leave: float
) -> None:
    """The detector alone: with the timer guard's watch of the socket off, the work left behind
    is rejected as ``reference_disturbed`` and as nothing else where it slowed the reference's
    timed calls, gains nothing where it did not, and the honest twin is not flagged. The guard names the wrapper in both runs, which with its watch on is
    ``timer_tampered``."""
    config = EvalConfig(
        device="cuda",
        build_cache=tmp_path / "builds",
        timing=TimingConfig(budget_s=4, min_samples=40),
        sandbox=SandboxConfig(call_timeout_s=120, import_timeout_s=600),
    )
    reported = _wire_unwatched(monkeypatch)
    result = evaluate(SCALE_SHIFT_TASK, LEAVE_WORK_BEHIND.format(leave=leave), config)
    assert result.correct and result.timing is not None, result.error
    # The guard saw the wrapper in place at reply time: with its watch of the socket on, that
    # alone is timer_tampered (REJECT, checks/clock.py); passed over, nothing else is.
    assert "Connection.send_bytes" in reported, reported
    codes = {f.code: f for f in result.findings}
    assert "timer_tampered" not in codes, codes["timer_tampered"].message
    facts = result.environment.reference_disturbance
    if leave and "reference_disturbed" not in codes:
        # The work left behind need not land in the reference's timed calls: on an H200 (two runs,
        # 2026-11-28; one of two on the H100 before) it slowed none of them beyond the margin and
        # identical work read 0.987x (events) and 0.979x (wall). With nothing disturbed there is
        # nothing for the detector to find; what must hold is that the candidate gained nothing.
        assert facts["slowdown"] <= SLOWDOWN_MARGIN, facts
        assert result.timing.speedup <= 1 + SLOWDOWN_MARGIN, (facts, result.timing.speedup)
    elif leave:
        assert codes["reference_disturbed"].severity is Severity.REJECT and not result.ok
        assert codes["reference_disturbed"].evidence["slowdown"] > SLOWDOWN_MARGIN
        rejects = [f.code for f in result.findings if f.severity is Severity.REJECT]
        assert rejects == ["reference_disturbed"], rejects  # the detector's verdict, no other's
    else:  # the same wrapper, nothing queued: an honest A-vs-A
        assert "reference_disturbed" not in codes, codes["reference_disturbed"].message
        # Farther from 0 than half the margin, honest pairs would put the margin at risk.
        assert abs(facts["slowdown"]) < SLOWDOWN_MARGIN / 2, facts
