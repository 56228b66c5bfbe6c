"""A Ray-backed pool with the local pool's interface (``pool.Pool``): candidates are evaluated by
GPU actors of a Ray cluster, one actor per GPU, and results stream back as they finish.

Each actor holds a local ``EvalPool`` of one device (the GPU Ray gave it, ``cuda:0`` under the
``CUDA_VISIBLE_DEVICES`` Ray sets) and runs the one evaluator there, so a result from a Ray
actor is the same kind of result as a local one: the actor only adds where it ran
(``environment.pool``: node, actor, GPU ids, attempts).

- Builds: an actor takes ``candidates_per_actor`` candidates at once; they compile on its node's
  CPU cores, in its pool's candidate workers, while it checks and times one at a time. Builds
  are not sent to separate CPU actors: the build cache is local to a node, so an extension
  built elsewhere would not be the one the GPU actor loads.
- Backpressure: at most ``candidates_per_actor`` requests per live actor are in Ray at once;
  the rest wait here, so a long ``evaluate_many`` neither floods the cluster nor strands more
  than an actor's share when that actor dies.
- Faults: an actor that dies (its process killed, its node lost) takes only the requests it
  held. Each goes back to the front of the queue once, for a fresh actor started in the dead
  one's place; a second loss records the request as an evaluator error, never as a failure of
  the candidate. A replacement that is not running after ``start_timeout_s`` (its node never
  came back, no GPU left in the cluster) is given up; with no actor left, what waits is
  recorded as evaluator errors too.

An actor's candidate and reference worker processes die with the actor's process (the sandbox's
parent-death signal), a killed actor included. Ray itself is optional (the ``ray`` extra) and
imported only here, and only when a Ray pool is made.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Self

from cudal1.config import EvalConfig, PoolConfig
from cudal1.eval.devices import cpu_share, resolve_device
from cudal1.eval.pool import EvalPool, StreamingPool
from cudal1.eval.workers import with_memory_limit
from cudal1.schema import (
    Environment,
    EvalRequest,
    EvalResult,
    PoolPlacement,
    Stage,
    StageRecord,
    Task,
    source_hash,
)

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 2  # the first try and one re-queue on a fresh actor (issue 13)
POLL_S = 0.2  # how often the dispatcher looks at new requests and starting actors


class RayPoolError(RuntimeError):
    """Ray is not installed, or the cluster cannot host the pool (no GPU at all)."""


def import_ray() -> ModuleType:
    """``ray``, imported when a Ray pool is made: nothing else of cudal1 needs it."""
    try:
        import ray
    except ImportError:
        raise RayPoolError("the Ray pool needs Ray: pip install 'cudal1[ray]'") from None
    return ray


def actor_device(device: str) -> str:
    """The device an actor times on: Ray shows it only its own GPU, as ``cuda:0``."""
    if device == "cpu":
        return "cpu"
    return resolve_device("auto" if device == "auto" else "cuda")


class DeviceActor:
    """Runs in a Ray worker process holding one GPU: a local pool of that one device."""

    def __init__(self, config: EvalConfig, workers: int, spares: int) -> None:
        ray = import_ray()
        context = ray.get_runtime_context()
        node = context.get_node_id()
        gpu_ids = [str(g) for g in ray.get_gpu_ids()]
        # The actors of a node's GPUs share its cores: each pool keeps to its own share, or every
        # one of them would time on the same last two cores (``devices.split_cpus``).
        gpus_on_node = next(
            (int(n["Resources"].get("GPU", 1)) for n in ray.nodes() if n["NodeID"] == node and n["Alive"]), 1
        )
        index = int(gpu_ids[0]) if gpu_ids and gpu_ids[0].isdigit() else 0
        # The node's memory too: each candidate worker of every actor there gets its share.
        config = with_memory_limit(config, (workers + spares) * gpus_on_node)
        self.pool = EvalPool(
            config,
            workers=workers,
            spares=spares,
            devices=[actor_device(config.device)],
            cpus=cpu_share(index, gpus_on_node),
        )
        self.where = {"node": node, "actor": context.get_actor_id(), "gpu_ids": gpu_ids}

    def ready(self) -> dict[str, Any]:
        return self.where

    def evaluate(self, task: Task, source: str) -> EvalResult:
        result = self.pool.evaluate(task, source)
        local = result.environment.pool or PoolPlacement("ray")
        where = self.where
        placement = dataclasses.replace(
            local, kind="ray", node=where["node"], actor=where["actor"], gpu_ids=tuple(where["gpu_ids"])
        )
        return result.with_environment(pool=placement)

    def shutdown(self) -> None:
        self.pool.close()


@dataclass
class _Job:
    request: EvalRequest
    future: Future[EvalResult]
    failures: list[str] = field(default_factory=list)


@dataclass
class _Actor:
    handle: Any
    ready: Any  # the ObjectRef of ``handle.ready``: resolved once the actor's pool is up
    started: float
    replaceable: bool
    up: bool = False
    running: int = 0


class RayPool(StreamingPool):
    """``pool.Pool`` over the GPU actors of a Ray cluster (see the module docstring)."""

    def __init__(self, config: EvalConfig, pool: PoolConfig | None = None) -> None:
        pool = pool or PoolConfig(kind="ray")
        self.config, self.settings, self._spares = config, pool.ray, pool.spares
        self._ray = ray = import_ray()
        self._lost_errors = (
            ray.exceptions.RayActorError,
            ray.exceptions.NodeDiedError,
            ray.exceptions.WorkerCrashedError,
            ray.exceptions.ObjectLostError,
        )
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(address=self.settings.address, include_dashboard=False, logging_level=logging.WARNING)
        actors = self.settings.actors or int(ray.cluster_resources().get("GPU", 0))
        if actors < 1:
            self._shutdown_ray()
            raise RayPoolError("the Ray cluster has no GPU: each actor of the Ray pool holds one")
        self._remote = ray.remote(
            num_gpus=1,
            num_cpus=self.settings.cpus_per_actor,
            max_restarts=0,  # a lost actor is replaced here, where its requests are re-queued
            max_concurrency=self.settings.candidates_per_actor + 1,  # + ready() while it works
        )(DeviceActor)
        self._cond = threading.Condition()
        self._queue: deque[_Job] = deque()
        self._running: dict[Any, tuple[_Job, _Actor]] = {}
        self._closed = False
        self._last_loss = ""
        self._actors = [self._start_actor(replaceable=False) for _ in range(actors)]
        self._await_first_actors()
        self._capacity = len(self._actors) * self.settings.candidates_per_actor
        self._thread = threading.Thread(target=self._dispatch, name="cudal1-ray", daemon=True)
        self._thread.start()

    # -- public ---------------------------------------------------------------------------
    @property
    def devices(self) -> tuple[str, ...]:
        return ()  # the GPUs are the cluster's, not this machine's

    @property
    def capacity(self) -> int:
        return self._capacity

    def actors(self) -> int:
        """Actors alive or starting now."""
        with self._cond:
            return len(self._actors)

    def submit(self, request: EvalRequest) -> Future[EvalResult]:
        future: Future[EvalResult] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the Ray pool is closed")
            self._queue.append(_Job(request, future))
            self._cond.notify_all()
        return future

    def in_flight(self) -> int:
        with self._cond:
            return len(self._queue) + len(self._running)

    def close(self) -> None:
        """Cancel what waits, let what runs finish, then stop the actors (and Ray, if started here)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            while self._queue:
                job = self._queue.popleft()
                if not job.future.cancel():  # a re-queued request: its caller is waiting on it
                    job.failures.append("the pool closed before it could be evaluated again")
                    job.future.set_result(evaluator_error(job.request, job.failures))
            self._cond.notify_all()
        self._thread.join()
        up = [a for a in self._actors if a.up]
        with contextlib.suppress(*self._lost_errors, self._ray.exceptions.GetTimeoutError):
            self._ray.get([a.handle.shutdown.remote() for a in up], timeout=60)
        for actor in self._actors:
            self._kill(actor)
        self._actors.clear()
        self._shutdown_ray()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _await_first_actors(self) -> None:
        """A cluster that cannot start an actor at all is a clear error here, not a run of
        evaluator errors; actors still starting after ``start_timeout_s`` are given up."""
        refs = [a.ready for a in self._actors]
        done, _ = self._ray.wait(refs, num_returns=len(refs), timeout=self.settings.start_timeout_s)
        for ref in done:
            self._started(ref)
        for actor in [a for a in self._actors if not a.up]:
            log.warning("a Ray actor did not start in %.0f s: given up", self.settings.start_timeout_s)
            self._actors.remove(actor)
            self._kill(actor)
        if not self._actors:
            self._shutdown_ray()
            why = self._last_loss or f"none was running after {self.settings.start_timeout_s:.0f} s"
            raise RayPoolError(f"no Ray GPU actor could be started: {why[:1000]}")

    # -- the dispatcher thread ----------------------------------------------------------------
    def _dispatch(self) -> None:
        while True:
            with self._cond:
                if self._closed and not self._running:
                    return
                self._send()
                waiting_on = list(self._running) + [a.ready for a in self._actors if not a.up]
                if not waiting_on:
                    self._cond.wait(POLL_S)
                    continue
            done, _ = self._ray.wait(waiting_on, num_returns=1, timeout=POLL_S)
            with self._cond:
                for ref in done:
                    if ref in self._running:
                        self._settle(ref)
                    else:
                        self._started(ref)
                self._give_up_on_slow_starts()

    def _send(self) -> None:
        """Hand waiting requests to live actors with a free slot, least busy first."""
        if self._queue and not self._actors and not self._closed:
            log.warning("no Ray actor left: starting one for %d waiting request(s)", len(self._queue))
            self._actors.append(self._start_actor(replaceable=False))
        per_actor = self.settings.candidates_per_actor
        while self._queue:
            free = [a for a in self._actors if a.up and a.running < per_actor]
            if not free:
                return
            job = self._queue.popleft()
            if not _claim(job):
                continue
            actor = min(free, key=lambda a: a.running)
            actor.running += 1
            ref = actor.handle.evaluate.remote(job.request.task, job.request.source)
            self._running[ref] = (job, actor)

    def _settle(self, ref: Any) -> None:
        job, actor = self._running.pop(ref)
        actor.running -= 1
        try:
            result: EvalResult = self._ray.get(ref)
        except self._lost_errors as exc:
            self._lose(actor, f"{type(exc).__name__}: {exc}")
            self._retry(job, f"Ray actor lost while evaluating: {type(exc).__name__}: {_first_line(exc)}")
            return
        except Exception as exc:  # the evaluator itself raised, as a local pool's future would
            job.future.set_exception(exc)
            return
        placement = result.environment.pool or PoolPlacement("ray")
        result = result.with_environment(pool=dataclasses.replace(placement, attempts=len(job.failures) + 1))
        if job.failures:
            result = result.with_environment(requeued_after=job.failures[-1][:2000])
        job.future.set_result(result)

    def _retry(self, job: _Job, reason: str) -> None:
        """Once more at the front of the queue; after a second loss, an evaluator error."""
        job.failures.append(reason)
        if len(job.failures) < MAX_ATTEMPTS and not self._closed:
            log.warning("%s: re-queued after: %s", job.request.task.name, reason)
            self._queue.appendleft(job)
        else:
            job.future.set_result(evaluator_error(job.request, job.failures))

    def _started(self, ref: Any) -> None:
        actor = next((a for a in self._actors if a.ready == ref), None)
        if actor is None:
            return
        try:
            where = self._ray.get(ref)
        except self._lost_errors as exc:  # its constructor failed, or its node went away first
            self._lose(actor, f"{type(exc).__name__}: {exc}")
            return
        actor.up = True
        actor.replaceable = True
        log.info("Ray actor up on node %s, GPU %s", where["node"][:12], ",".join(where["gpu_ids"]))

    def _give_up_on_slow_starts(self) -> None:
        now = time.monotonic()
        for actor in [a for a in self._actors if not a.up]:
            if now - actor.started > self.settings.start_timeout_s:
                log.warning("a Ray actor did not start in %.0f s: given up", self.settings.start_timeout_s)
                self._actors.remove(actor)
                self._kill(actor)
                if not self._actors:
                    self._fail_waiting(
                        f"no Ray GPU actor could be started in {self.settings.start_timeout_s:.0f} s"
                    )

    def _lose(self, actor: _Actor, reason: str) -> None:
        """Drop a dead actor; one that had been up gets a fresh actor in its place. One that died
        before it was up (its constructor failed) is not replaced: its successor would too."""
        if actor not in self._actors:
            return
        self._actors.remove(actor)
        self._kill(actor)
        self._last_loss = reason
        log.warning("Ray actor lost: %s", reason[:500])
        if actor.replaceable and not self._closed:
            self._actors.append(self._start_actor(replaceable=False))
        elif not self._actors:
            self._fail_waiting(f"no Ray GPU actor could be started: {reason}")

    def _fail_waiting(self, reason: str) -> None:
        """With no actor left, every waiting request is an evaluator error (a later submission
        tries to start an actor again)."""
        while self._queue:
            job = self._queue.popleft()
            if _claim(job):
                job.failures.append(reason)
                job.future.set_result(evaluator_error(job.request, job.failures))

    def _start_actor(self, *, replaceable: bool) -> _Actor:
        handle = self._remote.remote(self.config, self.settings.candidates_per_actor, self._spares)
        return _Actor(handle, handle.ready.remote(), time.monotonic(), replaceable)

    def _kill(self, actor: _Actor) -> None:
        with contextlib.suppress(Exception):  # already dead, or its node is gone
            self._ray.kill(actor.handle, no_restart=True)

    def _shutdown_ray(self) -> None:
        if self._owns_ray:
            self._ray.shutdown()


def evaluator_error(request: EvalRequest, failures: list[str]) -> EvalResult:
    """A request the cluster could not evaluate: no verdict on the candidate (``Stage.EVALUATOR``)."""
    return EvalResult(
        task=request.task.name,
        candidate_hash=source_hash(request.source),
        device="ray",
        stages=(StageRecord(Stage.EVALUATOR, False, 0.0, "\n".join(failures)),),
        environment=Environment(pool=PoolPlacement("ray", attempts=len(failures))),
    )


def _claim(job: _Job) -> bool:
    """Whether the job is still wanted; marks its future running (a re-queued one already is)."""
    return job.future.running() or job.future.set_running_or_notify_cancel()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]
