"""Quiet windows: while a pair is sampled, the pool's other candidate workers stand still.

A worker that imports a candidate, runs nvcc for its ``load_inline``, builds its ModelNew or makes
its first calls (torch.compile builds, Triton autotuning, CUDA-graph capture) on the GPU does so
beside the pair being timed. Its GPU work time-slices with the timed kernels, and its
compilers load the host that launches them; either can slow whichever side happens to be running.
(On the H100 this was not the main cause of the loaded batch's A-vs-A scatter: with the windows
alone a launch-bound pair still read 1.31x, from the two sides' cores and processes launching at
different speeds; see ``timing/paired.py``.) For the length of the sampling
the pool stops those workers' process groups (SIGSTOP; their compilers too) and lets them go on
afterwards; nothing else of the pool runs then except the two timed workers and the evaluator's
clock. Stopped time does not count against their timeouts (``WorkerProcess.suspend``), and a
candidate worker is killed (its CUDA context torn down) only between windows.

The timed pair's own candidate is not among them: the timing stops it during each of the
reference's turns itself (``timing/paired.py``), and work it left on the GPU shows in the
reference's times (``checks/interference.py``).

What is not covered: GPU work a stopped worker queued before it stopped still runs to its end,
and processes outside the pool (another program on the machine) are not stopped.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

# The trusted clock is a thread of the evaluator: when a timed worker replies, that thread waits
# for the GIL, which another of the pool's threads (static checks, bootstraps of the next
# candidate) may hold for the whole default interval of 5 ms. Inside a window it is handed over
# after this long instead.
WINDOW_SWITCH_INTERVAL_S = 5e-5


class _SwitchInterval:
    """The interpreter's switch interval is one per process, and several pools may open windows
    at once: it is short while any window of any pool is open, and what it was before after."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = 0
        self._saved = sys.getswitchinterval()

    @contextmanager
    def short(self) -> Iterator[None]:
        with self._lock:
            if self._open == 0:
                self._saved = sys.getswitchinterval()
                sys.setswitchinterval(WINDOW_SWITCH_INTERVAL_S)
            self._open += 1
        try:
            yield
        finally:
            with self._lock:
                self._open -= 1
                if self._open == 0:
                    sys.setswitchinterval(self._saved)


_SWITCH = _SwitchInterval()


class Pausable(Protocol):
    def suspend(self) -> None: ...
    def resume(self) -> None: ...
    def close(self) -> None: ...


class QuietWindows:
    """The pool's loading workers, and the windows (one per pair being sampled) that stop them."""

    def __init__(self, close_wait_s: float = 10.0) -> None:
        self._cond = threading.Condition()
        self._loading: list[Pausable] = []
        self._windows: list[list[Pausable]] = []  # per open window, the workers it stopped
        self._close_wait_s = close_wait_s

    def enter_loading(self, worker: Pausable) -> None:
        """``worker`` now imports, builds, loads or first calls a candidate outside any device lock."""
        with self._cond:
            self._loading.append(worker)
            for stopped in self._windows:  # a window open now stops it too
                worker.suspend()
                stopped.append(worker)

    def leave_loading(self, worker: Pausable) -> None:
        """``worker`` is about to be timed (or is done): no later window stops it. One stopped by
        a window still open (another device's) runs again when that window closes: wait for it."""
        with self._cond:
            if worker in self._loading:
                self._loading.remove(worker)
            while any(worker in stopped for stopped in self._windows):
                self._cond.wait()

    @contextmanager
    def window(self) -> Iterator[int]:
        """Stop every loading worker until the block ends (the timed pair's candidate has left
        loading by then); yields how many."""
        with self._cond:
            stopped = list(self._loading)
            for worker in stopped:
                worker.suspend()
            self._windows.append(stopped)
        try:
            with _SWITCH.short():
                yield len(stopped)
        finally:
            with self._cond:
                # By identity: two devices' windows that stopped the same workers hold equal
                # lists, and ``list.remove`` would take the other's (its workers then stayed
                # stopped for good, and the pool with them).
                self._windows = [w for w in self._windows if w is not stopped]
                for worker in stopped:
                    worker.resume()
                self._cond.notify_all()

    def close_outside_windows(self, worker: Pausable) -> None:
        """Close ``worker`` once no window is open (a CUDA context torn down beside a timed pair
        stalls it), waiting at most ``close_wait_s``."""
        deadline = time.monotonic() + self._close_wait_s
        with self._cond:
            while self._windows and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)
        worker.close()
