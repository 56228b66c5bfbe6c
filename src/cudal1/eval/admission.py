"""Admission of evaluations to a device: by memory (``DeviceGate``), and who may use it now
(``DeviceAccess``: checks side by side, timing alone).

On the CUDA-L1 release, six concurrent evaluations on one 80 GB H100 ran it out of memory: the
float64 references and the candidates built and waiting beside the one being timed (issue 10).
Each evaluation now asks its device for the memory it is expected to need, from its task's
reference peak measured on an earlier evaluation (float64 copy and low-precision twins
included), doubled for the candidate, plus a fixed allowance for two CUDA contexts; a task seen
for the first time asks for the device's share per concurrent evaluation. An evaluation that hit
a trusted-side failure or ran out of memory is retried once with the device to itself.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

CONTEXTS_BYTES = 2 * 2**30  # a reference and a candidate process, each with a CUDA context
USABLE = 0.85  # of the device's memory; the rest is the caching allocator's and the driver's slack


class DeviceGate:
    """Byte-counted admission to one device; ``exclusive`` waits for the device to itself."""

    def __init__(self, capacity_bytes: float) -> None:
        self.capacity = capacity_bytes
        self._cond = threading.Condition()
        self._used = 0.0
        self._holders = 0
        self._exclusive = False
        self._waiting_exclusive = 0

    @contextmanager
    def admit(self, need: float, *, exclusive: bool = False) -> Iterator[None]:
        with self._cond:
            self._waiting_exclusive += exclusive
            self._cond.wait_for(lambda: self._fits(need, exclusive))
            self._waiting_exclusive -= exclusive
            self._used += need
            self._holders += 1
            self._exclusive = exclusive
        try:
            yield
        finally:
            with self._cond:
                self._used -= need
                self._holders -= 1
                self._exclusive = False
                self._cond.notify_all()

    def _fits(self, need: float, exclusive: bool) -> bool:
        if self._exclusive:
            return False
        if exclusive:
            return self._holders == 0
        if self._waiting_exclusive:  # a retry waiting for the device is served first
            return False
        # One evaluation is always admitted, however large its need: it has the device alone.
        return self._holders == 0 or self._used + need <= self.capacity


def expected_need(peak_bytes: int | None, capacity: float, workers: int) -> float:
    """Bytes an evaluation of a task is admitted with (see the module docstring)."""
    if peak_bytes is None:
        return capacity / max(workers, 1)
    return 2 * peak_bytes + CONTEXTS_BYTES


class DeviceAccess:
    """Who may use one device now: evaluations' checks side by side (``shared``, taken around
    each request to a worker), a pair being timed alone (``exclusive``); a timing waiting for the
    device goes before requests that arrive after it, so it waits for the requests under way
    only, never for a stream of them.

    Why shared checks: one device lock around correctness and timing left the H100 mostly idle
    (issue 20's benchmark: 195 evaluations per GPU-hour, each holding the device 4-60 s, most of
    it in making inputs on the CPU, shipping outputs through pipes and float64 references). Checks
    decide nothing by time, so they may share the device; a timed pair has it to itself, with no
    other evaluation's request under way. Held around whole stages, the shared hold phase-locked
    the pool on the H100: a waiting timing stopped every new check until the slowest stage under
    way ended (40 s for a 3-D transposed convolution), and results came in bursts a minute apart.
    Taken per request, a timing waits for one request. An evaluation waiting for the device alone
    holds no shared hold, so two of them cannot wait on each other."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._waiting_exclusive = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive and not self._waiting_exclusive)
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._waiting_exclusive += 1
            self._cond.wait_for(lambda: not self._exclusive and self._shared == 0)
            self._waiting_exclusive -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()
