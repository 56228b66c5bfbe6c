"""The memory cap of a candidate's worker, kept two ways (``SandboxConfig.memory_limit_gb``).

- In the worker: RLIMIT_DATA, set before it runs anything. It bounds the process's private
  writable memory (heap, anonymous mappings), so an allocation past the cap fails at once in
  the allocation itself, before a page is touched and long before the kernel's OOM killer takes
  some process of the machine. Not RLIMIT_AS, which counts address space: a CUDA context
  reserves tens of GB of it and fails under any useful limit. RLIMIT_DATA does not count those
  reservations (they are not writable) nor device memory: on an H100 (torch 2.11, CUDA 13) a
  context, cuBLAS, cuDNN, pinned memory, torch.compile and a ``load_inline`` CUDA build all ran
  under an 8 GiB RLIMIT_DATA, the process's data segment at 1.6 GB.
- From the trusted side (``MemoryWatch``): what RLIMIT_DATA does not count, shared memory
  (pinned host memory, shared mappings), is read from ``/proc`` with the private resident
  memory, a few times a second; a worker over its cap is killed, and its evaluation says why.

What is not covered: processes the worker starts (compilers) each get the limit of their own
and are not watched; memory a candidate puts into files (``/dev/shm``) without mapping it;
device memory (the pool's admission and the CUDA allocator keep that).
"""

from __future__ import annotations

import contextlib
import logging
import re
import resource
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

WATCH_INTERVAL_S = 0.2  # at a few GB/s of first touch, the watch lets at most about 1 GB through
GB = 2**30

# What an allocation refused by RLIMIT_DATA looks like from Python, torch's CPU allocator and C++.
ALLOCATION_FAILED = re.compile(r"MemoryError|can't allocate memory|Cannot allocate memory|bad_alloc")


def limit_data(limit_bytes: int) -> None:
    """In the worker, before it runs anything: its private writable memory at most this."""
    resource.setrlimit(resource.RLIMIT_DATA, (limit_bytes, limit_bytes))


def resident_bytes(pid: int) -> int | None:
    """Private and shared resident memory of ``pid`` (RssAnon + RssShmem: what the process holds
    of the machine's memory, not the libraries it maps), None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            text = status.read()
    except OSError:
        return None
    fields = dict(re.findall(r"^(RssAnon|RssShmem):\s+(\d+) kB", text, re.MULTILINE))
    return sum(int(v) for v in fields.values()) * 1024


class MemoryWatch:
    """One thread that reads the resident memory of the watched workers every
    ``WATCH_INTERVAL_S`` and calls a worker's ``over`` (once) when it holds more than its limit."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._watched: dict[int, tuple[int, Callable[[int], None]]] = {}
        self._thread: threading.Thread | None = None

    def watch(self, pid: int, limit_bytes: int, over: Callable[[int], None]) -> None:
        with self._cond:
            self._watched[pid] = (limit_bytes, over)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="cudal1-memory-watch", daemon=True)
                self._thread.start()
            self._cond.notify()

    def unwatch(self, pid: int) -> None:
        with self._cond:
            self._watched.pop(pid, None)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._watched:
                    self._cond.wait()
                watched = dict(self._watched)
            for pid, (limit, over) in watched.items():
                held = resident_bytes(pid)
                if held is None or held > limit:
                    self.unwatch(pid)
                if held is not None and held > limit:
                    with contextlib.suppress(Exception):  # a callback's failure must not end the watch
                        over(held)
            with self._cond:
                self._cond.wait(WATCH_INTERVAL_S)


WATCH = MemoryWatch()


def exceeded(held_bytes: float, limit_bytes: float) -> str:
    """The verdict's wording."""
    return (
        f"memory limit exceeded: the candidate's process held {held_bytes / GB:.2f} GB, more than its"
        f" limit of {limit_bytes / GB:.2f} GB (sandbox.memory_limit_gb)"
    )


def refused(limit_bytes: float, error: str) -> str:
    """The verdict's wording for an allocation that RLIMIT_DATA refused inside the worker."""
    return (
        f"memory limit exceeded: an allocation failed at the candidate's limit of {limit_bytes / GB:.2f} GB"
        f" (sandbox.memory_limit_gb): {error}"
    )
