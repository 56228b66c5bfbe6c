"""Before a pair is sampled, the GPU is left to finish what other processes queued on it.

The quiet window (``eval/quiet.py``) stops the pool's loading workers with SIGSTOP, and a stopped
process launches nothing more; but kernels it queued before it stopped (a torch.compile
autotune's trials, a CUDA graph's capture run, a candidate's first calls) still run to their
end, time-sliced with the pair's. On two H200s (2026-11-28, ``benchmarks/gpu_sharing.py`` on a
verify's lane) 4 of 22 timed windows had another pool process on the GPU within a logged second
wholly inside them, up to 35% of the SMs; one was a stopped candidate worker.

How it is seen without any tool outside the process: the trusted reference worker launches a
one-element kernel and waits for it, again and again. With the GPU to itself the round trip takes
tens of microseconds; while another context still has work, the GPU runs one context at a time
and switches at the end of a timeslice (about a millisecond or more), so the round trip takes
that long. The wait ends after ``need`` round trips in a row under ``quiet_us``, or at ``max_s``.

What is not covered: work queued after the wait (a process outside the pool; the window stops
only the pool's loading workers), and a context whose queued work keeps running after its
process is stopped for longer than ``max_s`` (the result's timed window says the GPU did not
come quiet).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch


def wait_until_quiet(
    probe: Callable[[], float],
    *,
    max_s: float,
    quiet_us: float,
    need: int = 3,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Call ``probe`` (one round trip, microseconds) until ``need`` in a row take at most
    ``quiet_us``, or ``max_s`` has passed. Returns ``quiet`` (whether it came), ``waited_ms``,
    ``probes`` and ``slowest_us``."""
    start, run, probes, slowest = clock(), 0, 0, 0.0
    while True:
        us = probe()
        probes += 1
        slowest = max(slowest, us)
        run = run + 1 if us <= quiet_us else 0
        waited = clock() - start
        if run >= need or waited >= max_s:
            return {
                "quiet": run >= need,
                "waited_ms": round(waited * 1000, 3),
                "probes": probes,
                "slowest_us": round(slowest, 1),
            }


def gpu_round_trip(device: torch.device) -> Callable[[], float]:
    """One tiny kernel on ``device`` and the wait for it, timed on the host (microseconds)."""
    cell = torch.zeros(1, device=device)

    def probe() -> float:
        t0 = time.perf_counter()
        cell.add_(1)
        torch.cuda.synchronize(device)
        return (time.perf_counter() - t0) * 1e6

    return probe
