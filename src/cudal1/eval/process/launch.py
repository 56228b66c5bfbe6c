"""How a worker process is started: with a scrubbed environment (``worker_env``), under its
limits (``confine``, in the child before it runs anything), and so that it dies with the
evaluator, however the evaluator ends (``kill -9`` included): Linux's parent-death signal
(prctl(2), PR_SET_PDEATHSIG) set to SIGKILL in the child before it runs anything, which ends a
stopped (SIGSTOP) child too.

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
import resource
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from cudal1.eval.process import memory

# prctl(2): PR_SET_PDEATHSIG, the signal a process gets when its parent dies (Linux only).
PR_SET_PDEATHSIG = 1
# personality(2): ADDR_NO_RANDOMIZE, address-space layout randomisation off for the new image.
ADDR_NO_RANDOMIZE = 0x0040000
QUERY_PERSONALITY = 0xFFFFFFFF
# The string-hash seed of every worker with a fixed layout (``SandboxConfig.fixed_layout``).
FIXED_HASH_SEED = "0"
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def worker_env(
    keep: Iterable[str], sandbox: Path, extra: dict[str, str], *, fixed_layout: bool = False
) -> dict[str, str]:
    """A worker's environment: of this process's, only the variables named in ``keep``
    (``SandboxConfig.keep_env``); its sandbox as HOME, TMPDIR and Triton cache; one string-hash
    seed with ``fixed_layout``; then ``extra``."""
    env = {k: os.environ[k] for k in keep if k in os.environ}
    src_root = str(Path(__file__).resolve().parents[3])  # cudal1 importable when not installed
    env["PYTHONPATH"] = import_path(src_root, env.get("PYTHONPATH", ""))
    env.update(
        HOME=str(sandbox),
        TMPDIR=str(sandbox),
        TRITON_CACHE_DIR=str(sandbox / "triton"),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        PYTHONSAFEPATH="1",  # its child Pythons (compile workers) keep their cwd off sys.path too
        # Two workers alternate on few cores: spinning OpenMP threads of the idle one would
        # steal time from the one being timed.
        OMP_WAIT_POLICY="PASSIVE",
    )
    if fixed_layout:
        env["PYTHONHASHSEED"] = FIXED_HASH_SEED
    env.update(extra)
    return env


def import_path(src_root: str, inherited: str) -> str:
    """PYTHONPATH for a worker: cudal1's source root, then the inherited entries that name a
    directory. An empty or relative entry would put the worker's own directory (its cwd, which
    untrusted code writes) back on ``sys.path`` that ``-P`` keeps it off."""
    kept = [p for p in inherited.split(os.pathsep) if p and os.path.isabs(p)]
    return os.pathsep.join(dict.fromkeys([src_root, *kept]))


def confine(
    parent: int,
    cpus: set[int] | None,
    cpu_time_limit_s: int | None,
    memory_limit: int,
    fixed_layout: bool = False,
) -> None:
    """In the child, before it runs anything: die with the evaluator, then the limits; with
    ``fixed_layout``, the image it executes next gets no address-space randomisation."""
    die_with_parent(parent)
    if fixed_layout:
        no_randomisation()
    if cpus:
        os.sched_setaffinity(0, cpus)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if cpu_time_limit_s:
        lim = int(cpu_time_limit_s)
        resource.setrlimit(resource.RLIMIT_CPU, (lim, lim + 5))
    if memory_limit:
        memory.limit_data(memory_limit)


def no_randomisation() -> None:
    """Address-space randomisation off for this process's next image (personality(2)); where
    the system refuses (a container's seccomp profile may), the worker starts randomised, and
    its ``/proc/self/personality`` says so."""
    if _LIBC is not None:
        current = _LIBC.personality(QUERY_PERSONALITY)
        if current != -1:
            _LIBC.personality(current | ADDR_NO_RANDOMIZE)


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
