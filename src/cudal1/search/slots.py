"""Which waiting evaluation gets the next of the pool's slots when several tasks have work waiting.

A plain FIFO semaphore gave every slot to the task whose evaluations were queued first: on the
H100, ``optimize`` with the built-in baselines over 19 CUDA-L1 tasks ran one task's candidates
side by side and the tasks one after another, and 3 of 6 workers were busy. Candidates of one
task share its reference worker, which each holds for the whole of its checks and timing, so
they waited for each other even before they compiled.

``TaskSlots`` gives a freed slot to the waiting task with the fewest evaluations in flight, so
that the slots spread over as many tasks as have work. Among those it prefers the task served
last, then the one waiting longest: a task keeps its slot while it has work, so the pool's
reference workers (a bounded, least-recently-used set, each a process with a CUDA context) are
reused rather than started again for every evaluation, as a plain round robin over 19 tasks
would.

A request may ask to go ``first`` (round 0's kernels given with ``--seed``): every waiting
request that goes first is granted before any that does not, whatever its task, and the rule
above chooses among them. A run cut short has then measured the published kernels, which are
the bar it must beat, rather than a few tasks' baselines.

Runs inside one asyncio event loop (``contrastive.Search``); nothing here is thread-safe.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class TaskSlots:
    """At most ``capacity`` evaluations in flight; who waits longest is not who goes first."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity {capacity}: at least one slot")
        self.capacity = capacity
        self._free = capacity
        self._running: Counter[str] = Counter()
        # (rank, task) -> its waiting requests (arrival, grant); rank 0 goes first, then 1
        self._waiting: dict[tuple[int, str], deque[tuple[int, asyncio.Future[None]]]] = {}
        self._served: dict[str, int] = {}  # task -> the number of its latest grant
        self._arrivals = itertools.count()
        self._grants = itertools.count(1)
        self._wake_scheduled = False

    def in_flight(self) -> dict[str, int]:
        """Evaluations holding a slot, by task."""
        return {task: n for task, n in self._running.items() if n}

    @asynccontextmanager
    async def slot(self, task: str, *, first: bool = False) -> AsyncIterator[None]:
        """Hold one of the slots for ``task``; ``first``: before every request without it."""
        await self._acquire(task, 0 if first else 1)
        try:
            yield
        finally:
            self._release(task)

    async def _acquire(self, task: str, rank: int) -> None:
        # Every request waits for ``_wake``, scheduled after the requests made in the same turn of
        # the loop: a run's first burst is dealt out by the rule too, not first come first served.
        loop = asyncio.get_running_loop()
        granted: asyncio.Future[None] = loop.create_future()
        entry = (next(self._arrivals), granted)
        key = (rank, task)
        self._waiting.setdefault(key, deque()).append(entry)
        if not self._wake_scheduled:
            self._wake_scheduled = True
            loop.call_soon(self._wake)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release(task)  # granted, then cancelled before it could run: give it back
            else:
                self._forget(key, entry)
            raise

    def _release(self, task: str) -> None:
        self._running[task] -= 1
        self._free += 1
        self._wake()

    def _wake(self) -> None:
        """Deal the free slots out to the waiting requests."""
        self._wake_scheduled = False
        while self._free and self._waiting:
            chosen = self._next()
            entry = self._waiting[chosen][0]
            self._forget(chosen, entry)
            if entry[1].done():  # cancelled while waiting; its own handler finds it gone
                continue
            self._grant(chosen[1])
            entry[1].set_result(None)

    def _next(self) -> tuple[int, str]:
        """Those going first, then fewest in flight, then the task served last, then the one
        waiting longest."""

        def order(key: tuple[int, str]) -> tuple[int, int, int, int]:
            rank, task = key
            return rank, self._running[task], -self._served.get(task, 0), self._waiting[key][0][0]

        return min(self._waiting, key=order)

    def _grant(self, task: str) -> None:
        self._free -= 1
        self._running[task] += 1
        self._served[task] = next(self._grants)

    def _forget(self, key: tuple[int, str], entry: tuple[int, asyncio.Future[None]]) -> None:
        queue = self._waiting.get(key)
        if queue is not None and entry in queue:
            queue.remove(entry)
            if not queue:
                del self._waiting[key]
