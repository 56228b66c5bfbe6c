"""A local pool around the one evaluator: many candidates compile and import in parallel, each
device times one candidate at a time, warm spare workers hide interpreter start-up, and results
stream back as they finish.

Phases per request: static checks (this process) -> a spare worker imports the candidate, builds
ModelNew on its assigned device and makes its first, unchecked calls (CPU-bound work such as
load_inline builds, and the lazy builds of a first call: torch.compile, Triton autotuning, CUDA
graph capture; in parallel across requests, inside the memory admission gate) -> the device is
taken (``admission.DeviceAccess``: shared with other evaluations' checks, alone while a pair is
timed; ``EvalConfig.shared_checks``) -> correctness and timing alternate between the candidate
worker and the task's reference worker -> the candidate worker is killed (it ran untrusted code); the reference worker
stays for the task's next candidate. Only the checked and timed calls hold a device: on the
CUDA-L1 release, where many kernels compile in ``__init__``, holding it through the build left
the GPU idle most of the time, and a max-autotune build at the first checked call held the only
GPU for a minute. Until the device is taken a candidate's worker counts as loading, so the
quiet windows stop it while another pair is sampled. A task's reference worker is held (its
lock) only while it loads, while it hands out init inputs that vary with the seed, and for the
checked and timed part: a candidate of a task builds while another of the same task is timed.
How many requests are in each of these states is ``activity()`` (what a benchmark samples).

CPU placement (the rules are ``devices.split_cpus``'s): when the machine has cores to spare, each
device's timed pair gets a physical core of its own while it is timed (both sides on it, one after
the other), and the pool's own threads and worker processes (checks included) run on the rest. The pool pins only what it owns
(its worker processes and its threads), never its caller's process.

Several devices (``devices=["cuda:0", "cuda:1"]``): one timing lane per device (its lock, its
memory gate, its reference workers), a request goes to the device with the fewest requests in
flight, chosen before its worker loads the task (so the candidate's code runs with that GPU
current from its import on), and builds share the CPU cores. ``Pool`` is the interface this pool and the Ray pool
(``ray_pool``) share; ``pool_kinds.make_pool`` picks one from the config. The workers kept warm
(spares, the tasks' reference workers) are ``warm_workers``'s.

What is not covered: a candidate's worker sees every GPU of the machine (spares are started
before their device is known). Outputs must be on its own GPU and the current GPU must be left as
found (``checks.compare.on_device``, ``process.state.CURRENT_DEVICE``), but work it spreads onto
another GPU and copies back is not seen as such: giving each worker only its GPU at start-up
(``CUDA_VISIBLE_DEVICES``, spares per device) would close that. The Ray pool's actors see one GPU.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Protocol, Self

from cudal1.config import EvalConfig
from cudal1.eval.activity import Activity, PoolState
from cudal1.eval.admission import USABLE, DeviceAccess, DeviceGate, expected_need
from cudal1.eval.devices import pin_current_thread, resolve_device, split_cpus
from cudal1.eval.evaluator import Evaluation
from cudal1.eval.process.sandbox import WorkerProcess
from cudal1.eval.quiet import QuietWindows
from cudal1.eval.warm_workers import ReferenceWorkers, SparePool
from cudal1.eval.workers import ReferenceWorker, build_env, default_build_cache, with_memory_limit
from cudal1.schema import EvalRequest, EvalResult, PoolPlacement, Task

log = logging.getLogger(__name__)


class PoolStopped(RuntimeError):
    """The pool was stopped (its ``with`` block left by an exception or an interrupt) while this
    evaluation waited or ran: it has no result, so a run's candidate stays pending."""


class Pool(Protocol):
    """What every caller of the evaluator holds: a local pool or a Ray pool. Results stream back
    as they finish; a trusted-side failure comes back as a result marked ``evaluator_error``.
    A local pool left by an exception (Ctrl-C included) stops what is under way (``stop``); the
    Ray pool lets its actors finish what they hold."""

    @property
    def devices(self) -> Sequence[str]:
        """Devices of this machine the pool times on (none for a pool whose devices are remote)."""
        ...

    @property
    def capacity(self) -> int:
        """Evaluations worth keeping in flight: callers that throttle submissions use this."""
        ...

    def submit(self, request: EvalRequest) -> Future[EvalResult]: ...

    def in_flight(self) -> int:
        """Evaluations submitted and not finished yet."""
        ...

    def evaluate(self, task: Task, source: str) -> EvalResult: ...

    def evaluate_many(self, requests: Iterable[EvalRequest]) -> Iterator[tuple[EvalRequest, EvalResult]]: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...


WORKERS_PER_DEVICE = 2  # one candidate building while one is timed keeps a device busy


class StreamingPool:
    """``evaluate`` and ``evaluate_many`` on top of ``submit``: the local and the Ray pool's."""

    def submit(self, request: EvalRequest) -> Future[EvalResult]:
        raise NotImplementedError

    def evaluate(self, task: Task, source: str) -> EvalResult:
        return self.submit(EvalRequest(task, source)).result()

    def evaluate_many(self, requests: Iterable[EvalRequest]) -> Iterator[tuple[EvalRequest, EvalResult]]:
        """Results in the order they finish."""
        futures = {self.submit(r): r for r in requests}
        for fut in as_completed(futures):
            yield futures[fut], fut.result()


class EvalPool(StreamingPool):
    def __init__(
        self,
        config: EvalConfig,
        *,
        workers: int | None = None,
        spares: int = 1,
        devices: Iterable[str] = (),
        cpus: Iterable[int] | None = None,
    ) -> None:
        """``cpus``: the CPUs the pool places its work on (default: this process's affinity); a
        Ray actor passes its share of a node that other actors' pools share."""
        self.devices = list(devices) or [resolve_device(config.device)]
        if len(set(self.devices)) != len(self.devices):
            raise ValueError(f"devices {self.devices}: each device may be named once")
        workers = workers or WORKERS_PER_DEVICE * len(self.devices)
        # At most ``workers`` candidates in flight and ``spares`` ready: the memory cap's share.
        self.config = config = with_memory_limit(config, workers + spares)
        self._access = {d: DeviceAccess() for d in self.devices}
        self._assigned = dict.fromkeys(self.devices, 0)  # requests in flight, per device
        self._timed = dict.fromkeys(self.devices, 0)  # evaluations that reached each device
        self._assign_lock = threading.Lock()
        self._timing_cpus, self._general_cpus = split_cpus(
            self.devices, sorted(cpus) if cpus is not None else None
        )
        self._refs = ReferenceWorkers(config, workers + 2, self._general_cpus, self._check_running)
        self._gates: dict[str, DeviceGate] = {}
        self._totals: dict[str, int] = {}  # device memory, bytes (from the reference worker)
        self._reserved: dict[str, float] = {}  # held outside the pool (reserve)
        self._peaks: dict[str, int] = {}  # a task's reference peak device memory, by task hash
        self._workers = workers
        self._quiet = QuietWindows()
        self._activity = Activity()
        self._spares = SparePool(config, spares, self._general_cpus, self._quiet)
        # The pool's own threads (they talk to the workers and build nothing) keep off the timing
        # cores too; the caller's threads stay where the caller put them.
        self._executor = ThreadPoolExecutor(
            max_workers=workers,
            thread_name_prefix="cudal1-eval",
            initializer=pin_current_thread,
            initargs=(self._general_cpus,),
        )
        self.build_cache: Path = config.build_cache or default_build_cache()
        self._submitted = 0  # evaluations not finished (``in_flight``)
        # Stopping (``stop``): the candidate workers of evaluations under way, to kill.
        self._stopping = threading.Event()
        self._live: set[WorkerProcess] = set()
        self._live_lock = threading.Lock()

    # -- public ---------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self._workers

    def activity(self) -> dict[PoolState, int]:
        """Evaluations in each state now: busy ones build or hold a device, the others wait."""
        return self._activity.snapshot()

    def device_counts(self) -> dict[str, int]:
        """Evaluations that reached each device so far (a balance check for several devices)."""
        with self._assign_lock:
            return dict(self._timed)

    def submit(self, request: EvalRequest) -> Future[EvalResult]:
        """One evaluation, run on one of the pool's (pinned) threads."""
        subject = f"{request.task.name} {request.label or 'candidate'}"
        future = self._executor.submit(self._run, request.task, request.source, subject)
        with self._assign_lock:
            self._submitted += 1
        future.add_done_callback(self._finished)
        return future

    def _finished(self, future: Future[EvalResult]) -> None:
        with self._assign_lock:
            self._submitted -= 1

    def in_flight(self) -> int:
        with self._assign_lock:
            return self._submitted

    def close(self) -> None:
        """Let the evaluations under way finish, then close every worker."""
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._spares.close()
        self._refs.close()

    def stop(self) -> None:
        """Stop now, as when Ctrl-C leaves the pool's ``with`` block: evaluations not started are
        cancelled, those under way lose their workers (killed: SIGCONT, then SIGKILL, which ends
        a worker stopped for a quiet window too) and end in ``PoolStopped``, never in a result
        that blames the candidate; nothing new starts. ``close`` still follows."""
        self._stopping.set()
        self._executor.shutdown(wait=False, cancel_futures=True)
        with self._live_lock:
            workers = list(self._live)
        workers += self._refs.processes()
        for worker in workers:  # first: a timed pair's end ends the quiet window over the spares
            worker.kill()
        self._spares.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc and exc[0] is not None:  # left by an exception: stop, do not wait
            self.stop()
        self.close()

    def _check_running(self) -> None:
        if self._stopping.is_set():
            raise PoolStopped("the pool was stopped before this evaluation finished")

    # -- one request ------------------------------------------------------------------------
    def _run(self, task: Task, source: str, subject: str) -> EvalResult:
        """One evaluation; when the trusted side failed, or the candidate ran out of device memory
        beside others, once more with the device to itself. A second evaluator error stays one:
        recorded as such, never as the candidate's failure."""
        result = self._run_once(task, source, subject, exclusive=False)
        self._check_running()  # its workers may have been killed under it: no verdict
        if result.evaluator_error or result.environment.out_of_memory:
            log.warning("%s: retrying alone on the device after: %s", task.name, result.error[:200])
            again = self._run_once(task, source, subject, exclusive=True)
            self._check_running()
            return again.with_environment(retried_after=result.error[:2000])
        return result

    def _run_once(self, task: Task, source: str, subject: str, *, exclusive: bool) -> EvalResult:
        self._check_running()
        # The device first: the candidate's worker loads the task with it current, so that its
        # lead, its state as found and whatever the candidate makes at import are on the GPU it is
        # checked and timed on (assigned after the compile, the lead prepared again there read as
        # the candidate's change: two H200s, 2026-11-28).
        device = self._assign()
        try:
            ev = Evaluation(task, source, self.config, device)
            with self._activity.state("building"):
                env = self._prepare(ev)
            if env is None:
                return ev.result()
            self._load_and_check(ev, task, subject, exclusive, env)
            return ev.result()
        finally:
            with self._assign_lock:
                self._assigned[device] -= 1

    def _load_and_check(
        self, ev: Evaluation, task: Task, subject: str, exclusive: bool, env: dict[str, str]
    ) -> None:
        """A spare worker imports the candidate, then the checked and timed part on its device."""
        cand = self._spares.take()
        cand.subject = subject
        with self._live_lock:
            self._live.add(cand)
        self._quiet.enter_loading(cand)
        try:
            self._check_running()  # after the add: a stop either sees this worker or is seen here
            with self._activity.state("building"):
                ev.run_compile(cand, env)
            if not ev.failed:
                self._on_device(ev, task, cand, exclusive)
        finally:
            self._quiet.leave_loading(cand)
            if not cand.closed:
                self._quiet.close_outside_windows(cand)
            with self._live_lock:
                self._live.discard(cand)

    def _prepare(self, ev: Evaluation) -> dict[str, str] | None:
        """Static checks and the task's reference; the candidate's build environment, or None
        when the evaluation already failed."""
        ev.run_static()
        if ev.failed:
            return None
        # Reference info (torch, CUDA, arch) keys the build cache: the evaluation's device's.
        probe = self._refs.hold(ev.task, ev.device)
        try:
            if not ev.attach_reference(probe):
                self._refs.drop(probe)
                return None
            env, hit = build_env(ev.source, probe, self.build_cache)
        finally:
            self._refs.done_with(probe)
        ev.record.note(build_cache_hit=hit)
        return env

    def _on_device(self, ev: Evaluation, task: Task, cand: WorkerProcess, exclusive: bool) -> None:
        device = ev.device
        ref = self._refs.hold(task, device)
        placement = PoolPlacement("local", devices=len(self.devices))
        try:
            if not ev.attach_reference(ref):
                return
            gate = self._gate(device, ref)
            need = expected_need(self._peaks.get(task.hash), gate.capacity, self._workers)
            with ExitStack() as admitted:
                with self._activity.state("waiting"):
                    admitted.enter_context(gate.admit(need, exclusive=exclusive))
                with self._activity.state("building"):
                    ev.run_load()  # ModelNew and its first calls: lazy builds hold no device
                if not ev.failed:
                    self._check_and_time(ev, ref, device)
                # Its device memory goes back before the next evaluation is admitted.
                self._quiet.close_outside_windows(cand)
            if not ref.process.alive:
                self._refs.drop(ref)
        finally:
            self._refs.done_with(ref)
            with self._assign_lock:
                self._timed[device] += 1
                ev.record.note(pool=dataclasses.replace(placement, device_counts=dict(self._timed)))

    def _check_and_time(self, ev: Evaluation, ref: ReferenceWorker, device: str) -> None:
        """Correctness and timing. With shared checks, each request of the checks takes a shared
        hold of the device and the timing has it alone; the candidate's worker stays among the
        loading ones except while it is timed, so other pairs' quiet windows stop it (between its
        requests: a window opens only while the device is held alone). Otherwise the evaluation
        holds the device alone throughout."""
        access = self._access[device]
        shared = self.config.shared_checks
        with ExitStack() as held:
            with self._activity.state("waiting"):
                held.enter_context(ref.lock)  # first: see ``DeviceAccess``
                if not shared:
                    held.enter_context(access.exclusive())
            held.enter_context(self._activity.state("on_device"))
            if ev.cand is not None and self.config.timing.pause_others:
                ev.quiet = self._quiet.window
            if shared:
                ev.pair.hold = access.shared
                ev.alone = lambda: self._alone(ev, ref, device)
            else:
                if ev.cand is not None:
                    self._quiet.leave_loading(ev.cand)
                held.enter_context(self._timing_core(ev, ref, device))
            try:
                ev.run_on_device()
            finally:
                if ev.cand is not None:
                    self._quiet.leave_loading(ev.cand)
                peak = ref.release() if ref.process.alive else None
                if peak is not None:
                    self._peaks[ev.task.hash] = max(peak, self._peaks.get(ev.task.hash, 0))

    @contextmanager
    def _alone(self, ev: Evaluation, ref: ReferenceWorker, device: str) -> Iterator[None]:
        """The device to the timed pair alone, on the device's timing core; the candidate's
        worker leaves the loading ones for the block (its own window must not stop it)."""
        with self._access[device].exclusive():
            if ev.cand is not None:
                self._quiet.leave_loading(ev.cand)
            try:
                with self._timing_core(ev, ref, device):
                    yield
            finally:
                if ev.cand is not None and ev.cand.alive:
                    self._quiet.enter_loading(ev.cand)

    @contextmanager
    def _timing_core(self, ev: Evaluation, ref: ReferenceWorker, device: str) -> Iterator[None]:
        """The pair's workers on the device's timing core (where the machine has one to spare),
        and back on the general cores after: checks of several evaluations share those."""
        cpu = self._timing_cpus.get(device)
        if cpu is None or ev.cand is None:
            yield
            return
        ref.process.pin({cpu})
        ev.cand.pin({cpu})
        try:
            yield
        finally:
            for proc in (ref.process, ev.cand):
                if self._general_cpus and proc.alive:
                    proc.pin(self._general_cpus)

    def reserve(self, device: str, nbytes: float) -> None:
        """Device memory that something outside the pool holds (a policy's weights and optimizer
        state on the GPU it shares with the pool): admission leaves room for it from now on."""
        with self._assign_lock:
            self._reserved[device] = max(0.0, float(nbytes))
            if device in self._gates:
                self._gates[device].capacity = self._capacity(device)

    def _capacity(self, device: str) -> float:
        total = self._totals.get(device)
        return max(0.0, USABLE * total - self._reserved.get(device, 0.0)) if total else float("inf")

    def _gate(self, device: str, ref: ReferenceWorker) -> DeviceGate:
        with self._assign_lock:
            if device not in self._gates:
                self._totals[device] = ref.device_info.get("memory_bytes") or 0
                self._gates[device] = DeviceGate(self._capacity(device))
            return self._gates[device]

    def _assign(self) -> str:
        """The device with the fewest requests in flight on it."""
        with self._assign_lock:
            device = min(self.devices, key=self._assigned.__getitem__)
            self._assigned[device] += 1
            return device


def evaluate(task: Task, source: str, config: EvalConfig | None = None) -> EvalResult:
    """Evaluate one candidate: a pool of one, so that every caller shares one code path."""
    with EvalPool(config or EvalConfig(), workers=1, spares=0) as pool:
        return pool.evaluate(task, source)
