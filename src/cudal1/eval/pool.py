"""A local pool around the one evaluator: many candidates compile and import in parallel, each
device times one candidate at a time, warm spare workers hide interpreter start-up, and results
stream back as they finish.

Phases per request: static checks (this process) -> a spare worker imports the candidate and
builds ModelNew on its assigned device (CPU-bound work such as load_inline builds, in parallel
across requests) -> the device lock is taken -> correctness and timing alternate between the
candidate worker and the task's reference worker -> the candidate worker is killed (it ran
untrusted code); the reference worker stays for the task's next candidate. Only the checked and
timed calls hold a device: on the CUDA-L1 release, where many kernels compile in ``__init__``,
holding it through the build left the GPU idle most of the time.

CPU placement: when the machine has cores to spare, each device's timed pair gets two cores of
its own, and the pool's own threads and worker processes run on the rest. The pool pins only
what it owns (its worker processes and its threads), never its caller's process.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path

from cudal1.config import EvalConfig
from cudal1.eval.evaluator import Evaluation, resolve_device
from cudal1.eval.process.protocol import Role
from cudal1.eval.process.sandbox import WorkerProcess
from cudal1.eval.workers import ReferenceWorker, build_env, default_build_cache
from cudal1.schema import EvalRequest, EvalResult, Task

log = logging.getLogger(__name__)


class SparePool:
    """Candidate worker processes started ahead of need (each serves one candidate)."""

    def __init__(self, config: EvalConfig, target: int, cpus: set[int] | None = None) -> None:
        self.config = config
        self.target = target
        self.cpus = cpus
        self._ready: queue.Queue[WorkerProcess] = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False
        self._fill()

    def _fill(self) -> None:
        with self._lock:
            while not self._closed and self._ready.qsize() < self.target:
                self._ready.put(WorkerProcess(self.config.sandbox, role=Role.CANDIDATE, cpus=self.cpus))

    def _fill_in_background(self) -> None:
        _pin_current_thread(self.cpus)
        self._fill()

    def take(self) -> WorkerProcess:
        try:
            worker = self._ready.get_nowait()
        except queue.Empty:
            worker = WorkerProcess(self.config.sandbox, role=Role.CANDIDATE, cpus=self.cpus)
        if self.target:
            threading.Thread(target=self._fill_in_background, daemon=True).start()
        if not worker.alive:
            worker.close()
            return self.take()
        return worker

    def close(self) -> None:
        with self._lock:
            self._closed = True
        while True:
            try:
                self._ready.get_nowait().close()
            except queue.Empty:
                return


class EvalPool:
    def __init__(
        self, config: EvalConfig, *, workers: int = 2, spares: int = 1, devices: Iterable[str] = ()
    ) -> None:
        self.config = config
        self.devices = list(devices) or [resolve_device(config.device)]
        self._device_locks = {d: threading.Lock() for d in self.devices}
        self._assigned = dict.fromkeys(self.devices, 0)  # requests past compile, per device
        self._assign_lock = threading.Lock()
        self._timing_cpus, self._general_cpus = _split_cpus(self.devices)
        self._refs: dict[tuple[str, str], ReferenceWorker] = {}
        self._refs_lock = threading.Lock()
        self._spares = SparePool(config, spares, self._general_cpus)
        # The pool's own threads (they talk to the workers and build nothing) keep off the timing
        # cores too; the caller's threads stay where the caller put them.
        self._executor = ThreadPoolExecutor(
            max_workers=workers,
            thread_name_prefix="cudal1-eval",
            initializer=_pin_current_thread,
            initargs=(self._general_cpus,),
        )
        self.build_cache: Path = config.build_cache or default_build_cache()

    # -- public ---------------------------------------------------------------------------
    def submit(self, request: EvalRequest) -> Future[EvalResult]:
        return self._executor.submit(self._run, request.task, request.source)

    def evaluate(self, task: Task, source: str) -> EvalResult:
        """One evaluation, run on one of the pool's (pinned) threads."""
        return self.submit(EvalRequest(task, source)).result()

    def evaluate_many(self, requests: Iterable[EvalRequest]) -> Iterator[tuple[EvalRequest, EvalResult]]:
        """Results in the order they finish."""
        futures = {self.submit(r): r for r in requests}
        for fut in as_completed(futures):
            yield futures[fut], fut.result()

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._spares.close()
        with self._refs_lock:
            for ref in self._refs.values():
                ref.close()
            self._refs.clear()

    def __enter__(self) -> EvalPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one request ------------------------------------------------------------------------
    def _run(self, task: Task, source: str) -> EvalResult:
        ev = Evaluation(task, source, self.config, self.devices[0])
        ev.run_static()
        if ev.failed:
            return ev.result()
        # Reference info (torch, CUDA, arch) keys the build cache; any device's worker will do.
        probe = self._reference(task, self.devices[0])
        if not ev.attach_reference(probe):
            self._drop_reference(probe)
            return ev.result()
        env, hit = build_env(source, probe, self.build_cache)
        ev.environment["build_cache_hit"] = hit
        cand = self._spares.take()
        try:
            ev.run_compile(cand, env)
            if not ev.failed:
                self._on_device(ev, task)
        finally:
            cand.close()
        return ev.result()

    def _on_device(self, ev: Evaluation, task: Task) -> None:
        device = self._assign()
        try:
            ev.device = device
            ref = self._reference(task, device)
            if not ev.attach_reference(ref):
                return
            ev.run_load()
            if ev.failed:
                return
            with self._device_locks[device], ref.lock:
                pair = self._timing_cpus.get(device)
                if pair and ev.cand is not None:
                    ref.process.pin({pair[0]})
                    ev.cand.pin({pair[1]})
                ev.run_on_device()
                if pair and self._general_cpus:
                    ref.process.pin(self._general_cpus)
            if not ref.process.alive:
                self._drop_reference(ref)
        finally:
            with self._assign_lock:
                self._assigned[device] -= 1

    def _assign(self) -> str:
        """The device with the fewest requests building or waiting on it."""
        with self._assign_lock:
            device = min(self.devices, key=self._assigned.__getitem__)
            self._assigned[device] += 1
            return device

    def _reference(self, task: Task, device: str) -> ReferenceWorker:
        key = (task.hash, device)
        with self._refs_lock:
            ref = self._refs.get(key)
            if ref is None or not ref.process.alive:
                ref = ReferenceWorker(task, self.config, device, self._general_cpus)
                self._refs[key] = ref
            return ref

    def _drop_reference(self, ref: ReferenceWorker) -> None:
        with self._refs_lock:
            for key, value in list(self._refs.items()):
                if value is ref:
                    del self._refs[key]
        ref.close()


def _split_cpus(devices: list[str]) -> tuple[dict[str, tuple[int, int]], set[int] | None]:
    """Two cores of its own per device for the timed pair, when the machine has cores to spare;
    everything else (imports, builds) runs on the rest."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 * len(devices) + 2:
        return {}, None
    # From the end: CPU 0 takes most interrupts.
    pairs = {d: (cpus[-1 - 2 * i], cpus[-2 - 2 * i]) for i, d in enumerate(devices)}
    return pairs, set(cpus[: len(cpus) - 2 * len(devices)])


def _pin_current_thread(cpus: set[int] | None) -> None:
    """Linux applies ``sched_setaffinity(0, ...)`` to the calling thread only."""
    if cpus:
        os.sched_setaffinity(0, cpus)


def evaluate(task: Task, source: str, config: EvalConfig | None = None) -> EvalResult:
    """Evaluate one candidate: a pool of one, so that every caller shares one code path."""
    with EvalPool(config or EvalConfig(), workers=1, spares=0) as pool:
        return pool.evaluate(task, source)
