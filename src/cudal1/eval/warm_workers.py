"""The workers a local pool keeps warm: candidate workers started ahead of need (``SparePool``:
each serves one candidate, then is killed), and the tasks' reference workers kept from one
candidate to the next (``ReferenceWorkers``: one per task and device, idle ones closed beyond a
cap). Both hide interpreter start-up and torch's import (seconds each) from an evaluation.
"""

from __future__ import annotations

import queue
import threading
from collections import OrderedDict
from collections.abc import Callable

from cudal1.config import EvalConfig
from cudal1.eval.devices import pin_current_thread
from cudal1.eval.process.protocol import Role
from cudal1.eval.process.sandbox import WorkerError, WorkerProcess
from cudal1.eval.quiet import QuietWindows
from cudal1.eval.workers import ReferenceWorker
from cudal1.schema import Task


class SparePool:
    """Candidate worker processes started ahead of need (each serves one candidate)."""

    def __init__(
        self, config: EvalConfig, target: int, cpus: set[int] | None = None, quiet: QuietWindows | None = None
    ) -> None:
        self.config = config
        self.target = target
        self.cpus = cpus
        self.quiet = quiet
        self._ready: queue.Queue[WorkerProcess] = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False
        self._starting: set[WorkerProcess] = set()  # started, not ready yet (``close`` kills them)
        self._starting_lock = threading.Lock()
        self._fill(quiet=False)  # nothing is timed yet: these start beside the pool's own start

    def _fill(self, quiet: bool = True) -> None:
        with self._lock:
            while not self._closed and self._ready.qsize() < self.target:
                self._ready.put(self.start_worker(quiet))

    def start_worker(self, quiet: bool = True) -> WorkerProcess:
        """A fresh worker, stopped by the quiet windows until it is ready: its interpreter and
        torch import share the evaluator's core, where the trusted clock's thread runs (in the
        loaded CPU adversarial batch, honest pairs' trusted intervals spread over 0.2-5.8x)."""
        worker = WorkerProcess(self.config.sandbox, role=Role.CANDIDATE, cpus=self.cpus)
        if self.quiet is None or not quiet:
            return worker
        with self._starting_lock:
            self._starting.add(worker)
        if self._closed:  # closed meanwhile: ``close`` may not have seen it
            worker.kill()
        self.quiet.enter_loading(worker)
        try:
            worker.wait_ready()
        except WorkerError:
            pass  # take() finds it dead and starts another
        finally:
            self.quiet.leave_loading(worker)
            with self._starting_lock:
                self._starting.discard(worker)
        return worker

    def _fill_in_background(self) -> None:
        pin_current_thread(self.cpus)
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
        """Close the spares; one still starting is killed (a quiet window may hold it stopped
        for as long as a pair is timed), so a fill under way ends at once."""
        self._closed = True
        with self._starting_lock:
            starting = list(self._starting)
        for worker in starting:
            worker.kill()
        with self._lock:  # the fill under way is over; what it left is drained below
            pass
        while True:
            try:
                self._ready.get_nowait().close()
            except queue.Empty:
                return


class ReferenceWorkers:
    """The tasks' reference workers, one per task and device, each held by the evaluations that
    use it (``hold`` until ``done_with``). Idle ones beyond ``cap`` are closed, least recently used
    first: each holds a CUDA context, and verify over 250 tasks kept all of them alive before."""

    def __init__(
        self, config: EvalConfig, cap: int, cpus: set[int] | None, check: Callable[[], None]
    ) -> None:
        """``check`` raises when no new worker may start (the pool was stopped)."""
        self.config = config
        self.cap = cap
        self.cpus = cpus
        self._check = check
        self._refs: OrderedDict[tuple[str, str], ReferenceWorker] = OrderedDict()
        self._lock = threading.Lock()

    def hold(self, task: Task, device: str) -> ReferenceWorker:
        """The task's reference worker on ``device``, held until ``done_with``."""
        key = (task.hash, device)
        with self._lock:
            self._check()  # under the lock ``processes`` takes to find the workers to kill
            ref = self._refs.get(key)
            if ref is None or not ref.process.alive:
                ref = ReferenceWorker(task, self.config, device, self.cpus)
                self._refs[key] = ref
            self._refs.move_to_end(key)
            ref.users += 1
            idle = [k for k, r in self._refs.items() if r.users == 0]
            for old in idle[: max(0, len(self._refs) - self.cap)]:
                self._refs.pop(old).close()
            return ref

    def done_with(self, ref: ReferenceWorker) -> None:
        with self._lock:
            ref.users -= 1

    def drop(self, ref: ReferenceWorker) -> None:
        """Close ``ref`` and forget it: the next ``hold`` of its task starts another."""
        with self._lock:
            for key, value in list(self._refs.items()):
                if value is ref:
                    del self._refs[key]
        ref.close()

    def processes(self) -> list[WorkerProcess]:
        with self._lock:
            return [ref.process for ref in self._refs.values()]

    def close(self) -> None:
        with self._lock:
            for ref in self._refs.values():
                ref.close()
            self._refs.clear()
