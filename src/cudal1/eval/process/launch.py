"""How a worker process is started so that it dies with the evaluator, however the evaluator
ends (``kill -9`` included): Linux's parent-death signal (prctl(2), PR_SET_PDEATHSIG) set to
SIGKILL in the child before it runs anything, which ends a stopped (SIGSTOP) child too.

The signal follows the *thread* that forked the child, not its process: every worker is forked
by one launcher thread that lives as long as the process. Not covered: the processes a worker
starts itself (its compilers), for which the signal cannot be set; and systems other than Linux,
where workers are started the same way without the signal.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
from concurrent.futures import Future
from typing import Any

# prctl(2): PR_SET_PDEATHSIG, the signal a process gets when its parent dies (Linux only).
PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def die_with_parent(parent: int) -> None:
    """In a child between fork and exec: SIGKILL when the parent dies. A parent that died before
    this ran is not signalled any more (the child has a new parent already): then die now."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


class _Launcher:
    """Starts every worker from one thread that lives as long as the evaluator's process. The
    parent-death signal fires when the *thread* that forked the child ends (prctl(2)), and the
    pool starts workers from short-lived threads (the spare pool's fill): started there, a warm
    spare would be killed as soon as that thread returned."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[tuple[Future[subprocess.Popen[bytes]], dict[str, Any]]] = (
            queue.SimpleQueue()
        )
        self._pid = 0  # the process whose thread serves the jobs (a forked child has none)

    def popen(self, **kwargs: Any) -> subprocess.Popen[bytes]:
        future: Future[subprocess.Popen[bytes]] = Future()
        with self._lock:
            if self._pid != os.getpid():
                self._pid, self._jobs = os.getpid(), queue.SimpleQueue()
                threading.Thread(
                    target=self._serve, args=(self._jobs,), name="cudal1-launcher", daemon=True
                ).start()
            self._jobs.put((future, kwargs))
        try:
            return future.result()
        except BaseException:  # interrupted while it started: nobody will hold it, so it goes
            future.add_done_callback(_kill_unwanted)
            raise

    @staticmethod
    def _serve(jobs: queue.SimpleQueue[tuple[Future[subprocess.Popen[bytes]], dict[str, Any]]]) -> None:
        while True:
            future, kwargs = jobs.get()
            try:
                future.set_result(subprocess.Popen(**kwargs))
            except BaseException as exc:
                future.set_exception(exc)


def _kill_unwanted(future: Future[subprocess.Popen[bytes]]) -> None:
    if future.exception() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(future.result().pid, signal.SIGKILL)


_LAUNCHER = _Launcher()


def popen(**kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(**kwargs)``, forked by the launcher thread."""
    return _LAUNCHER.popen(**kwargs)
