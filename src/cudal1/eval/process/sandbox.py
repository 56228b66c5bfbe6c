"""Worker processes with a hard timeout and kill, a private directory, a scrubbed environment and
resource limits. How a worker is started (its environment, its limits, the parent-death signal)
is ``launch``; finding what workers leave behind (processes outside the group, killed runs'
sandboxes) is ``leftovers``; this module is the evaluator's handle on one worker, and the list
below covers the three.

What is covered:
- a candidate that segfaults, raises, hangs, exhausts memory or hits an illegal CUDA address
  costs its own worker only: the evaluator sees a dead or silent socket, kills the whole process
  group and records why;
- the worker starts with a fresh interpreter (``subprocess``, never ``fork``), in its own session,
  in an empty private directory that is also its HOME, TMPDIR and Triton cache; environment
  variables other than ``SandboxConfig.keep_env`` (API keys among them) are not passed on;
- that directory is never on the worker's import path (``python -P``, and ``PYTHONSAFEPATH=1``
  for the Pythons it starts): a module a candidate writes there (or into another worker's
  directory: the trusted reference's is writable by the same user) cannot shadow a module the
  trusted side imports later;
- a worker dies with the evaluator, even one the pool had stopped (SIGSTOP) for a quiet window:
  on Linux the kernel sends it SIGKILL when the evaluator exits however it exits (``kill -9``
  included; parent-death signal, set before the worker runs anything), and SIGKILL ends a
  stopped process too;
- core dumps are off, CPU time is limited, and a candidate's worker holds at most its memory
  limit (``memory.py``: RLIMIT_DATA in the worker, its resident memory watched from here): one
  that allocates past it fails with "memory limit exceeded" at its stage, before the kernel's
  OOM killer takes a process of the machine;
- the directory goes when the worker is closed; those of a run killed outright go when the
  next run on the machine starts its first worker, and with them any process still running out
  of them (a compiler the worker had started: see below);
- replies are decoded with ``wire`` (no pickle), so a worker cannot run code in the evaluator.

What is not covered (needs an OS sandbox such as seccomp/landlock or a container):
- a candidate can still read files the evaluator's user can read, open sockets, or write
  outside its directory, including into the shared extension build cache under a different
  source hash. Static checks flag such code; the evaluator never trusts a worker's numbers;
- a process the candidate starts that leaves the worker's process group (``setsid``) is not
  stopped with it (quiet windows; the reference's turns of the timing). It is found, while the
  worker lives, as its descendant or by the sandbox as its TMPDIR (``outside_group``: the timing
  rejects it, and it is killed with the worker); one that also rewrote its environment after a
  double fork is not found;
- the processes a worker starts (its compilers) are not signalled when the evaluator dies: the
  parent-death signal is per process and cannot be set for them. A running one ends with its
  build; one stopped for a quiet window at that moment stays stopped until the next run on the
  machine starts (it finds them by their TMPDIR, which a process may change).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Literal, Protocol

from cudal1.eval.process import launch, leftovers, memory
from cudal1.eval.process.protocol import Command, Role
from cudal1.eval.process.wire import WireError, decode, encode, header, send_message

log = logging.getLogger(__name__)


CANDIDATE_ENTRY = "cudal1.eval.process.worker"
# Set at the first worker's start in this process, which removes the sandboxes of killed runs.
_swept = threading.Event()
# A reply that takes longer than this says so in the log, and again each time as long again,
# until it comes or its timeout ends the wait (120 s for a call, 600 s for an import): a hung
# candidate otherwise showed nothing for minutes.
STILL_WAITING_S = 60.0


class SandboxLimits(Protocol):
    """What the launcher needs of a sandbox configuration (``config.SandboxConfig`` has it)."""

    @property
    def call_timeout_s(self) -> float: ...
    @property
    def import_timeout_s(self) -> float: ...
    # A candidate worker's memory cap (None or 0: none; a pool sets it from the machine).
    @property
    def memory_limit_gb(self) -> float | None: ...
    @property
    def cpu_time_limit_s(self) -> int | None: ...
    @property
    def keep_env(self) -> tuple[str, ...]: ...
    # Address-space randomisation off and one hash seed (issue 22: per-process timing scatter).
    @property
    def fixed_layout(self) -> bool: ...


# How a worker failed: it died, went silent past its timeout, sent garbage, or was killed for
# holding more than its memory limit.
WorkerFailure = Literal["died", "timeout", "protocol", "memory"]


class WorkerError(RuntimeError):
    """A worker failed: it died, went silent past its timeout, or sent garbage."""

    def __init__(
        self, message: str, *, kind: WorkerFailure, log_tail: str = "", role: Role = Role.CANDIDATE
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.log_tail = log_tail
        self.role = role  # whose worker: a reference worker's failure is the evaluator's


class RemoteError(RuntimeError):
    """A command raised inside the worker; the worker is still alive."""

    def __init__(self, error: str, traceback: str) -> None:
        super().__init__(error)
        self.traceback = traceback


def _stage_of(what: str) -> str:
    """The stage a reply to ``what`` (a command, or "start-up") belongs to."""
    return str(what.stage) if isinstance(what, Command) else what


class WorkerProcess:
    def __init__(
        self,
        config: SandboxLimits,
        *,
        extra_env: dict[str, str] | None = None,
        role: Role = Role.CANDIDATE,
        entry: str = CANDIDATE_ENTRY,
        cpus: set[int] | None = None,
    ) -> None:
        """Start ``python -P -m ENTRY FD``: the candidate's server, or the one of the role named.
        ``-P``: the working directory, which untrusted code can write, is not on ``sys.path``."""
        self.config = config
        self.role = role
        self.cpus = cpus
        self._parent = os.getpid()
        # The trusted side's reference worker is not capped: its failure would be the evaluator's.
        limit = config.memory_limit_gb if role is Role.CANDIDATE else None
        self.memory_limit = int(limit * memory.GB) if limit else 0
        self.memory_exceeded = ""  # the verdict, once the watch has killed the worker for it
        # How log lines name what the worker serves (the pool sets it: task and label).
        self.subject = f"{role} worker"
        if not _swept.is_set():
            _swept.set()
            leftovers.remove_orphaned_sandboxes(Path(tempfile.gettempdir()))
        self.dir = Path(tempfile.mkdtemp(prefix=f"cudal1-{role}-{os.getpid()}-"))
        self.log_path = self.dir / "worker.log"
        parent_sock, child_sock = socket.socketpair()
        env = launch.worker_env(config.keep_env, self.dir, extra_env or {}, fixed_layout=config.fixed_layout)
        with open(self.log_path, "wb") as logf:
            self.proc = launch.popen(
                args=[sys.executable, "-P", "-m", entry, str(child_sock.fileno())],
                cwd=self.dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                pass_fds=(child_sock.fileno(),),
                start_new_session=True,  # its own process group: kill takes its children too
                preexec_fn=partial(
                    launch.confine,
                    self._parent,
                    cpus,
                    config.cpu_time_limit_s,
                    self.memory_limit,
                    config.fixed_layout,
                ),
            )
        child_sock.close()
        if self.memory_limit:
            memory.WATCH.watch(self.proc.pid, self.memory_limit, self._over_memory_limit)
        self.conn = Connection(os.dup(parent_sock.fileno()))
        parent_sock.close()
        self.ready = False
        self.closed = False
        # Suspension (``suspend``/``resume``): nested holds, and the seconds spent stopped, which
        # the reply timeouts do not count; holds let go only at the next request (``resume``).
        self._pause_lock = threading.Lock()
        self._holds = 0
        self._held_until_request = 0
        self._paused_at = 0.0
        self._paused_s = 0.0
        self.requests_sent = 0  # requests sent to it: whether it ran since (``resume``)

    # -- talking ------------------------------------------------------------------------------
    def wait_ready(self, timeout: float | None = None) -> None:
        """Until the worker's interpreter has started and imported torch: no candidate code has
        run yet, so it gets an import's time limit, not a call's (on a loaded 2-core machine a
        start-up took over 8 s, a short call limit in tests)."""
        if self.ready:
            return
        reply = self._receive(timeout if timeout is not None else self.config.import_timeout_s, "start-up")
        if not reply.get("ready"):
            raise WorkerError("worker sent no ready message", kind="protocol", role=self.role)
        self.ready = True

    def request(self, cmd: Command, timeout: float | None = None, **args: Any) -> dict[str, Any]:
        """Send one command and wait for its reply; RemoteError if it raised in the worker."""
        self._send(cmd, args)
        reply = self._receive(timeout if timeout is not None else self.config.call_timeout_s, cmd)
        if not reply.get("ok"):
            raise self._remote_error(reply)
        return reply

    def request_raw(self, cmd: Command, timeout: float | None = None, **args: Any) -> bytes:
        """Like ``request`` but returns the reply undecoded, for forwarding large outputs to the
        reference worker, which compares them; only the JSON header is read here."""
        self._send(cmd, args)
        data = self._receive_bytes(timeout if timeout is not None else self.config.call_timeout_s, cmd)
        try:
            head = header(data)
        except WireError as exc:
            self.kill()
            raise WorkerError(
                f"{self.role} worker sent a bad message: {exc}", kind="protocol", role=self.role
            ) from None
        if not isinstance(head, dict) or not head.get("ok"):
            raise self._remote_error(head if isinstance(head, dict) else {"error": "non-dict reply"})
        return data

    def send(self, cmd: Command, **args: Any) -> None:
        """Send without waiting, for a caller that times the round trip itself (see ``receive``)."""
        self._wake(request=True)
        self.conn.send_bytes(encode({"cmd": cmd.value, **args}))

    def _send(self, cmd: Command, args: dict[str, Any]) -> None:
        if not cmd.accepts(self.role):
            raise ValueError(f"{cmd.value!r} is not a command for a {self.role} worker")
        self.wait_ready()
        self._wake(request=True)
        try:
            send_message(self.conn, {"cmd": cmd.value, **args})
        except OSError as exc:
            raise self._died(f"while sending {cmd.value!r}: {exc}") from None
        except BaseException:
            # Cut off part-way (an interrupt between a request and a message that follows it):
            # the worker would read the next request as the rest of this one.
            self.kill()
            raise

    def receive(self, cmd: Command, timeout: float | None = None) -> dict[str, Any]:
        reply = self._receive(timeout if timeout is not None else self.config.call_timeout_s, cmd)
        if not reply.get("ok"):
            raise self._remote_error(reply)
        return reply

    def _remote_error(self, reply: dict[str, Any]) -> RemoteError:
        """A command's failure as the worker reported it; an allocation its memory limit refused
        (RLIMIT_DATA) is said to be that, whatever the code that asked for it made of it."""
        error, tb = str(reply.get("error", "unknown error")), str(reply.get("traceback", ""))
        if self.memory_limit and memory.ALLOCATION_FAILED.search(error):
            return RemoteError(memory.refused(self.memory_limit, error.strip().splitlines()[-1][:500]), "")
        return RemoteError(error, tb)

    def _over_memory_limit(self, held: int) -> None:
        """The memory watch's call: the worker holds more than its limit. It is killed now; the
        reply it owes then fails with this verdict (``_died``)."""
        self.memory_exceeded = memory.exceeded(held, self.memory_limit)
        log.info("%s: %s", self.subject, self.memory_exceeded)
        self._signal_group(signal.SIGCONT)
        self._signal_group(signal.SIGKILL)

    def _receive(self, timeout: float, what: str) -> dict[str, Any]:
        data = self._receive_bytes(timeout, what)
        try:
            reply = decode(data)
        except WireError as exc:
            self.kill()
            raise WorkerError(
                f"{self.role} worker sent a bad message: {exc}", kind="protocol", role=self.role
            ) from None
        if not isinstance(reply, dict):
            self.kill()
            raise WorkerError(f"{self.role} worker sent a non-dict reply", kind="protocol", role=self.role)
        return reply

    def _receive_bytes(self, timeout: float, what: str) -> bytes:
        self._wake()  # a process held until its next request cannot reply: let it run
        try:
            if not self._poll(timeout, what):
                self.kill()
                raise WorkerError(
                    f"{self.role} worker timed out after {timeout:.0f}s during {what}",
                    kind="timeout",
                    role=self.role,
                    log_tail=self.log_tail(),
                )
            return self.conn.recv_bytes()
        except (EOFError, OSError) as exc:
            raise self._died(f"during {what}: {type(exc).__name__}") from None

    def _poll(self, timeout: float, what: str) -> bool:
        """Wait for a reply up to ``timeout`` seconds of time not spent suspended; every
        ``STILL_WAITING_S`` of them, a line says what is awaited."""
        start = time.monotonic()
        paused0 = self.paused_s()
        said = 0
        while True:
            waited = time.monotonic() - start - (self.paused_s() - paused0)
            left = timeout - waited
            if left <= 0:
                return False
            if waited >= (said + 1) * STILL_WAITING_S:
                said = int(waited // STILL_WAITING_S)
                log.warning(
                    "still waiting: %s in %s for %.0f s (limit %.0f s)",
                    self.subject, _stage_of(what), waited, timeout,
                )  # fmt: skip
            if self.conn.poll(min(left, 1.0, STILL_WAITING_S)):
                return True

    def _died(self, context: str) -> WorkerError:
        code = self._wait_exit(2.0)
        self.kill()
        if self.memory_exceeded:
            where = context.partition(":")[0]  # "during build", without the socket's error
            return WorkerError(f"{self.memory_exceeded}, {where}", kind="memory", role=self.role)
        if code is not None and code < 0:
            how = f"killed by signal {signal.Signals(-code).name}"
        elif code is not None:
            how = f"exited with code {code}"
        else:
            how = "stopped answering"
        return WorkerError(
            f"{self.role} worker {how} {context}", kind="died", role=self.role, log_tail=self.log_tail()
        )

    def _wait_exit(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def pin(self, cpus: set[int]) -> None:
        """Move every thread of the worker to ``cpus`` (the timed pair gets cores of its own, so
        compile work elsewhere cannot slow one side's kernel launches and bias the ratio)."""
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{self.proc.pid}/task")]
        except OSError:
            tids = [self.proc.pid]
        for tid in tids:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, cpus)

    def suspend(self) -> None:
        """Stop the worker's whole process group (SIGSTOP: its compiler children too) until the
        matching ``resume``; holds nest. The pool stops the workers that are building or loading
        while a pair on the device is timed (``eval/quiet.py``), so that their GPU work and their
        compilers' CPU load run beside no timed sample. Time stopped does not count against the
        reply timeouts."""
        with self._pause_lock:
            self._holds += 1
            if self._holds == 1:
                self._paused_at = time.monotonic()
                self._signal_group(signal.SIGSTOP)

    def resume(self, *, at_next_request: bool = False) -> None:
        """Let go of one ``suspend`` hold. ``at_next_request``: only when the evaluator next sends
        the worker a request (or waits for a reply from it), so that it stays stopped through
        whatever the evaluator does meanwhile: the timing keeps a candidate stopped from the
        reference's turn until its own next request (``timing/paired.py``), and
        ``requests_sent`` tells whether it ran in between."""
        with self._pause_lock:
            if self._holds == 0:
                return
            if at_next_request:
                self._held_until_request += 1
                return
            self._release()

    def _release(self) -> None:
        """One hold less (the caller holds ``_pause_lock``); the group runs again at the last."""
        self._holds -= 1
        if self._holds == 0:
            self._signal_group(signal.SIGCONT)
            self._paused_s += time.monotonic() - self._paused_at

    def _wake(self, *, request: bool = False) -> None:
        """Before a request is sent (counted) or a reply awaited: let go of the holds kept until then."""
        with self._pause_lock:
            self.requests_sent += request
            while self._held_until_request:
                self._held_until_request -= 1
                if self._holds:
                    self._release()

    def paused_s(self) -> float:
        """Seconds spent suspended so far (including a suspension still in progress)."""
        with self._pause_lock:
            return self._paused_s + (time.monotonic() - self._paused_at if self._holds else 0.0)

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    @property
    def alive(self) -> bool:
        return not self.closed and self.proc.poll() is None

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    def outside_group(self) -> list[int]:
        """Processes the worker started that left its process group: neither ``suspend`` nor the
        group's kill reaches them (``processes_outside_group``)."""
        return leftovers.processes_outside_group(self.proc.pid, self.dir)

    def kill(self) -> None:
        # The whole group, even when the worker itself is gone: a compiler it started may linger.
        # SIGKILL ends a stopped (quiet-window) process too; SIGCONT first all the same, so that
        # no member of the group is left stopped whatever becomes of the kill. First what left
        # the group (found while the worker lives: its children are init's afterwards).
        leftovers.kill_all(self.outside_group())
        self._signal_group(signal.SIGCONT)
        self._signal_group(signal.SIGKILL)
        memory.WATCH.unwatch(self.proc.pid)
        self._wait_exit(5.0)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        memory.WATCH.unwatch(self.proc.pid)
        with self._pause_lock:
            self._held_until_request = 0
            if self._holds:
                self._holds = 0
                self._signal_group(signal.SIGCONT)
        if self.proc.poll() is None:
            leftovers.kill_all(self.outside_group())  # the group ends with the worker; these would not
            with contextlib.suppress(Exception):
                self.conn.send_bytes(encode({"cmd": Command.EXIT.value}))
            if self._wait_exit(2.0) is None:
                self.kill()
        else:
            self.kill()
        with contextlib.suppress(Exception):
            self.conn.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
