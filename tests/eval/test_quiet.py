"""Quiet windows: while a pair is sampled, the pool's loading candidate workers are stopped, and
stopped time does not count against their timeouts."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from cudal1.config import SandboxConfig
from cudal1.eval.pool import EvalPool
from cudal1.eval.process.protocol import Command
from cudal1.eval.process.sandbox import WorkerProcess
from cudal1.eval.quiet import WINDOW_SWITCH_INTERVAL_S, QuietWindows
from cudal1.eval.warm_workers import SparePool
from cudal1.schema import EvalRequest


class FakeWorker:
    def __init__(self) -> None:
        self.holds = 0
        self.closed = False

    def suspend(self) -> None:
        self.holds += 1

    def resume(self) -> None:
        self.holds -= 1

    def close(self) -> None:
        self.closed = True


def test_a_window_stops_the_loading_workers_but_the_timed_one():
    quiet = QuietWindows()
    a, b, timed = FakeWorker(), FakeWorker(), FakeWorker()
    for w in (a, b, timed):
        quiet.enter_loading(w)
    quiet.leave_loading(timed)  # as the pool does when it takes the device for it
    with quiet.window() as n:
        assert n == 2 and (a.holds, b.holds, timed.holds) == (1, 1, 0)
        late = FakeWorker()
        quiet.enter_loading(late)  # starts loading while the window is open: stopped at once
        assert late.holds == 1
    assert (a.holds, b.holds, late.holds, timed.holds) == (0, 0, 0, 0)
    quiet.leave_loading(a)
    with quiet.window():
        assert a.holds == 0 and b.holds == 1


def test_windows_nest_and_leaving_waits_for_the_other_devices_window():
    quiet = QuietWindows()
    w = FakeWorker()
    quiet.enter_loading(w)
    left = threading.Event()
    with quiet.window():
        with quiet.window():
            assert w.holds == 2
        assert w.holds == 1
        t = threading.Thread(target=lambda: (quiet.leave_loading(w), left.set()))
        t.start()
        time.sleep(0.2)
        assert not left.is_set()  # still stopped by the open window: it may not be timed yet
    t.join(5)
    assert left.is_set() and w.holds == 0


def test_two_devices_windows_that_stopped_the_same_workers_each_close_their_own():
    """Two windows open at once (two devices' timings) that stopped the same workers hold equal
    lists: closing one must not close the other's. It did (``list.remove`` by equality): a worker
    that began loading after the first closed was stopped under a closed window and never let
    go, and the second's close raised; every candidate of the pool waited on it (the learning
    check's arms over two H200s, 2026-11-28: the GPUs idle for 7 minutes)."""
    quiet = QuietWindows()
    w = FakeWorker()
    quiet.enter_loading(w)
    with quiet.window():
        with quiet.window():
            assert w.holds == 2
        late = FakeWorker()
        quiet.enter_loading(late)  # only the outer window is open: stopped once, by it
        assert (w.holds, late.holds) == (1, 1)
    assert (w.holds, late.holds) == (0, 0)
    done = threading.Event()
    t = threading.Thread(target=lambda: (quiet.leave_loading(late), done.set()), daemon=True)
    t.start()
    t.join(5)
    assert done.is_set()  # no window is open any more


def test_inside_windows_the_gil_changes_hands_quickly():
    """The trusted clock's thread gets the GIL within the short interval while any window is open."""
    quiet = QuietWindows()
    before = sys.getswitchinterval()
    assert before > WINDOW_SWITCH_INTERVAL_S
    with quiet.window():
        with quiet.window():
            assert sys.getswitchinterval() == pytest.approx(WINDOW_SWITCH_INTERVAL_S)
        assert sys.getswitchinterval() == pytest.approx(WINDOW_SWITCH_INTERVAL_S)  # the outer window is open
    assert sys.getswitchinterval() == before


def test_windows_of_two_pools_closing_out_of_order_restore_the_switch_interval():
    """The interval is the process's: the second pool's window must not save the short one."""
    first, second = QuietWindows(), QuietWindows()
    before = sys.getswitchinterval()
    a, b = first.window(), second.window()
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)
    assert sys.getswitchinterval() == pytest.approx(WINDOW_SWITCH_INTERVAL_S)  # b is still open
    b.__exit__(None, None, None)
    assert sys.getswitchinterval() == before


def test_a_spare_worker_starting_is_stopped_by_a_window(fast_config):
    """A spare's interpreter and torch import stand still while a pair is sampled."""
    quiet = QuietWindows()
    spares = SparePool(fast_config, 0, quiet=quiet)
    with quiet.window():
        started: list[WorkerProcess] = []
        t = threading.Thread(target=lambda: started.append(spares.start_worker()))
        t.start()
        t.join(3)
        assert t.is_alive()  # stopped by the window before it could say it is ready
    t.join(120)
    (worker,) = started
    try:
        assert worker.ready and worker.alive
    finally:
        worker.close()


def test_workers_are_closed_between_windows():
    quiet = QuietWindows(close_wait_s=30)
    w = FakeWorker()
    closed = threading.Event()
    with quiet.window():
        t = threading.Thread(target=lambda: (quiet.close_outside_windows(w), closed.set()))
        t.start()
        time.sleep(0.2)
        assert not closed.is_set() and not w.closed
    t.join(5)
    assert closed.is_set() and w.closed


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_suspended_worker_stops_and_its_stopped_time_is_not_a_timeout():
    with WorkerProcess(SandboxConfig(call_timeout_s=30)) as worker:
        worker.wait_ready()
        worker.suspend()
        deadline = time.monotonic() + 5
        while _state(worker.proc.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state(worker.proc.pid) == "T"
        threading.Timer(1.5, worker.resume).start()
        # 1.5 s stopped, 1 s allowed: only the time it could run counts.
        assert worker.request(Command.PING, timeout=1.0)["ok"]
        assert worker.paused_s() >= 1.4
        assert _state(worker.proc.pid) != "T"


def test_a_worker_let_go_at_its_next_request_stays_stopped_until_then():
    """The timing's pause (``WorkerEndpoint``): resumed lazily, a worker stands still until the
    evaluator next talks to it, and ``requests_sent`` tells whether it was talked to since."""
    with WorkerProcess(SandboxConfig(call_timeout_s=30)) as worker:
        worker.wait_ready()
        worker.suspend()
        worker.resume(at_next_request=True)
        sent = worker.requests_sent
        time.sleep(0.3)
        assert _state(worker.proc.pid) == "T"  # still stopped: nothing was asked of it
        worker.suspend()  # a second pause while still held: nested, let go by the same request
        worker.resume(at_next_request=True)
        assert worker.request(Command.PING, timeout=5.0)["ok"]
        assert worker.requests_sent == sent + 1
        assert _state(worker.proc.pid) != "T"
        worker.suspend()
        worker.resume()  # an ordinary resume lets it go at once
        assert worker.request(Command.PING, timeout=5.0)["ok"]


def test_the_pool_stops_a_loading_candidate_while_another_is_timed(task, fast_config, candidate):
    """A candidate still importing (a slow module body) is stopped for the other's sampling; both
    results come out right, and the timed one says how many workers stood still."""
    slow = candidate("        return torch.relu(self.lin(x))", imports="import time\ntime.sleep(10)\n")
    quick = candidate("        return torch.relu(self.lin(x))")
    with EvalPool(fast_config, workers=2, spares=0) as pool:
        results = dict(
            (req.source, res)
            for req, res in pool.evaluate_many([EvalRequest(task, slow), EvalRequest(task, quick)])
        )
    assert results[slow].ok and results[quick].ok, (results[slow].error, results[quick].error)
    assert results[quick].environment.workers_paused_while_timed == 1
    assert results[slow].environment.workers_paused_while_timed == 0
