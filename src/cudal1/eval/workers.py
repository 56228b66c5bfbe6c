"""The trusted side's handles on worker processes: the task's reference worker, the timing
endpoint over any worker, and the per-candidate build environment.

A reference worker (``reference_process``) is trusted: it imports only the task and serves every
evaluation of that task, one at a time under its lock (init inputs that no seed changes are
served without it: ``ReferenceWorker.init_args``). A failure of one of its commands is the task's
(``StageFailed`` with ``reference=True``), never the candidate's.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from cudal1.config import EvalConfig
from cudal1.eval.checks.stage_failure import StageFailed
from cudal1.eval.process.protocol import Command, Role
from cudal1.eval.process.sandbox import RemoteError, WorkerError, WorkerProcess
from cudal1.eval.reference_process import ENTRY as REFERENCE_ENTRY
from cudal1.eval.timing import stats
from cudal1.eval.timing.paired import SampleRequest, TimedReply, Warmup
from cudal1.schema import Stage, Task, source_hash

# Queried once per device: each query makes a CUDA context, which would disturb a timing run
# under way in other workers.
_DEVICE_INFO: dict[str, dict[str, Any]] = {}


class ReferenceWorker:
    """A trusted worker holding one task's reference; reused across that task's evaluations."""

    def __init__(self, task: Task, config: EvalConfig, device: str, cpus: set[int] | None = None) -> None:
        self.task = task
        self.device = device
        self.process = WorkerProcess(config.sandbox, role=Role.REFERENCE, entry=REFERENCE_ENTRY, cpus=cpus)
        self.process.subject = f"{task.name} reference"
        self.lock = threading.Lock()
        self.info: dict[str, Any] = {}
        self.device_info: dict[str, Any] = {}
        self.error: str | None = None
        self.users = 0  # evaluations holding it (the pool closes idle ones beyond its cap)
        self._loaded = False
        self._fixed_init: list[Any] | None = None  # init inputs no seed changes (``init_args``)
        self._init_checked = False
        # The task's state attributes that move its output (``process.model_state``), once a
        # build found them; None before: a candidate built then is rebuilt if the task is stateful.
        self.stateful: list[str] | None = None

    @property
    def loaded(self) -> bool:
        return self._loaded

    def ensure_loaded(self) -> None:
        """Start the worker on the task (once; the caller holds ``lock``)."""
        if self._loaded:
            return
        try:
            self.info = self.process.request(Command.HELLO)
            if self.device not in _DEVICE_INFO:
                _DEVICE_INFO[self.device] = self.process.request(Command.DEVICE_INFO, device=self.device)
            self.device_info = _DEVICE_INFO[self.device]
            self.process.request(
                Command.LOAD_TASK, source=self.task.source, name=self.task.name, path=self.task.path
            )
            if self.device.startswith("cuda"):  # where the device lock is worth seconds
                self.process.request(Command.PREWARM)
        except (RemoteError, WorkerError) as exc:
            # A task that does not import is the task's fault; a worker that died or a device
            # out of memory at start-up is the evaluator's.
            evaluator = isinstance(exc, WorkerError) or is_resource_error(str(exc))
            self.error = f"reference: task {self.task.name!r} failed to load: {exc}"
            raise StageFailed(
                Stage.EVALUATOR if evaluator else Stage.LOAD, self.error, reference=True
            ) from None
        self._loaded = True

    def request(self, cmd: Command, **args: Any) -> dict[str, Any]:
        """A request whose failure is the task's fault, and is said so."""
        try:
            return self.process.request(cmd, **args)
        except RemoteError as exc:
            raise StageFailed(cmd.stage, f"reference failed in {cmd.value}: {exc}", reference=True) from None

    def init_args(self, seed: int) -> list[Any]:
        """The task's init inputs under ``seed``, from the reference (a candidate's worker never
        makes them). Most tasks' are plain numbers that no seed changes: once two seeds gave the
        same plain values, they are served from here without the lock, so that a candidate of
        the task builds while another holds the reference for its checks and timing (the lock
        is held for the whole of those, and a build used to wait for it)."""
        if self._fixed_init is not None:
            return list(self._fixed_init)
        with self.lock:
            args = list(self.request(Command.INIT_INPUTS, seed=seed)["args"])
            if not self._init_checked and _plain(args):
                self._init_checked = True  # asked once: init inputs that vary are fetched every time
                other = list(self.request(Command.INIT_INPUTS, seed=seed ^ 1)["args"])
                if other == args:
                    self._fixed_init = args
        return list(args)

    def release(self) -> int | None:
        """After an evaluation: the worker drops everything but the task; its peak device memory."""
        try:
            return self.process.request(Command.FORGET, keys=[], slots=[], everything=True).get("peak_bytes")
        except (RemoteError, WorkerError):
            return None

    @property
    def build_key(self) -> str:
        return (
            "|".join(str(self.info.get(k)) for k in ("torch", "cuda"))
            + "|"
            + str(self.device_info.get("arch"))
        )

    def environment(self) -> dict[str, Any]:
        return {
            "torch": self.info.get("torch"),
            "cuda": self.info.get("cuda"),
            "python": self.info.get("python"),
            "gpu": self.device_info.get("name"),
            "arch": self.device_info.get("arch"),
        }

    def close(self) -> None:
        self.process.close()


class WorkerEndpoint:
    """``timing.paired.Endpoint`` over a worker process."""

    def __init__(self, process: WorkerProcess) -> None:
        self.process = process
        self._rtt: float | None = None
        self._requests_at_resume: int | None = None  # None: never paused yet

    def pause(self) -> bool:
        """Stop the worker's process group (SIGSTOP: every thread and child in it); whether it
        may have run since the last ``resume``: it was sent a request since (or never paused)."""
        ran = self._requests_at_resume != self.process.requests_sent
        self.process.suspend()
        return ran

    def resume(self) -> None:
        """The worker runs again at its next request, not before: between two turns of the
        reference with no request of its own in between, it stays stopped throughout."""
        self._requests_at_resume = self.process.requests_sent
        self.process.resume(at_next_request=True)

    def warmup(self, min_calls: int, min_ms: float) -> Warmup:
        r = self.process.request(Command.WARMUP, min_calls=min_calls, min_ms=min_ms)
        return Warmup(int(r["calls"]), float(r["ms"]), int(r.get("set_bytes", 0)), int(r.get("out_bytes", 0)))

    def round_trip_ms(self) -> float:
        if self._rtt is None:
            samples = []
            for _ in range(7):
                t0 = time.perf_counter()
                self.process.request(Command.PING)
                samples.append((time.perf_counter() - t0) * 1000)
            self._rtt = stats.median(samples)
        return self._rtt

    def prepare(self) -> None:
        self.process.request(Command.PREPARE)

    def start(self, request: SampleRequest) -> None:
        self.process.send(
            Command.TIME,
            calls=request.calls,
            seed=request.seed,
            sets=request.sets,
            max_bytes=request.max_bytes,
            start=request.first_set,
            lead_us=request.lead_us,
        )

    def finish(self) -> TimedReply:
        """The sample's one reply, its shape checked: a worker is untrusted, and a reply it
        shaped wrongly is its failure, not the evaluator's."""
        r = self.process.receive(Command.TIME)
        ms = r.get("ms")
        if not isinstance(ms, int | float) or not math.isfinite(ms) or ms < 0:
            raise RemoteError(f"worker reported an impossible time {ms!r}", "")
        tail = r.get("tail_ms", 0.0)
        if not isinstance(tail, int | float) or not math.isfinite(tail) or tail < 0:
            raise RemoteError(f"worker reported an impossible tail {tail!r}", "")
        digests, inputs, tampered = r.get("digests"), r.get("input_digest"), r.get("tampered", [])
        if not (
            isinstance(digests, list)
            and all(isinstance(d, list) for d in digests)
            and isinstance(inputs, list)
            and isinstance(tampered, list)
        ):
            raise RemoteError("worker sent a timing reply without its digests", "")
        tampered_names = [str(t) for t in tampered]
        kept = r.get("kept", [])
        kept_names = [str(k) for k in kept] if isinstance(kept, list) else ["the reply's kept list is not a list"]
        return TimedReply(
            float(ms), bool(r.get("ahead", True)), inputs, digests, tampered_names, float(tail), kept_names
        )


def _plain(value: Any) -> bool:
    """Numbers, strings, booleans and None, in lists and dicts: values with no tensor among them."""
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return value is None or isinstance(value, bool | int | float | str)


_RESOURCE = re.compile(
    r"out of memory|OutOfMemoryError|CUDA error|cudaError|CUBLAS_STATUS|CUDNN_STATUS|CUDA driver",
    re.IGNORECASE,
)


def is_resource_error(message: str) -> bool:
    """Out of device memory, or a CUDA driver/library error: the machine's state, not the code's."""
    return bool(_RESOURCE.search(message))


# A candidate worker's memory cap when none is configured: half of the machine's memory shared
# among the pool's candidate workers (the other half keeps the reference workers, the evaluator,
# compilers and the system). With no cap, a candidate that allocated most of the machine
# brought the kernel's OOM killer onto whichever process it chose.
MEMORY_SHARE = 0.5
MIN_MEMORY_LIMIT_GB = 2.0  # a CUDA worker's data segment is 1.6 GB at rest (H100, torch 2.11)


def machine_memory_bytes() -> int:
    """Physical memory, or the cgroup's limit where a lower one is set (a container)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    with contextlib.suppress(OSError, ValueError):
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            total = min(total, int(limit))
    return total


def with_memory_limit(config: EvalConfig, candidate_workers: int) -> EvalConfig:
    """``config`` with its candidate workers' memory cap settled: as configured, or by the
    machine's share (``MEMORY_SHARE``) for each of ``candidate_workers``."""
    if config.sandbox.memory_limit_gb is not None:
        return config
    share = MEMORY_SHARE * machine_memory_bytes() / max(1, candidate_workers) / 2**30
    sandbox = config.sandbox.model_copy(update={"memory_limit_gb": max(MIN_MEMORY_LIMIT_GB, round(share, 1))})
    return config.model_copy(update={"sandbox": sandbox})


def default_build_cache() -> Path:
    return Path.home() / ".cache" / "cudal1" / "builds"


def build_env(source: str, ref: ReferenceWorker, cache_root: Path) -> tuple[dict[str, str], bool]:
    """Extension builds cached by (source hash, torch, CUDA, arch): one directory per key."""
    key = hashlib.sha256(f"{source_hash(source)}|{ref.build_key}".encode()).hexdigest()[:24]
    path = cache_root / key
    hit = path.exists()
    path.mkdir(parents=True, exist_ok=True)
    env = {"TORCH_EXTENSIONS_DIR": str(path)}
    arch = ref.device_info.get("arch")
    if arch:
        env["TORCH_CUDA_ARCH_LIST"] = str(arch)
    return env, hit
