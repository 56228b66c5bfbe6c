"""Which evaluation gets a freed slot: one that goes first (a seed), then the waiting task with the
fewest in flight, then the task served last, then the one waiting longest (``search/slots.py``);
the search loop keeps every slot busy with two tasks' candidates interleaved, and submits every
task's seeds before anything else, in a fresh run and in a resumed one."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from candidate_fixtures import GEMM_TASK, make_result

from cudal1.config import BudgetConfig
from cudal1.llm import Ledger
from cudal1.run.database import CandidateDB
from cudal1.run.rows import Provenance
from cudal1.schema import EvalRequest, EvalResult, Task
from cudal1.search.budget import Budget
from cudal1.search.contrastive import Search
from cudal1.search.lifecycle import Proposal
from cudal1.search.slots import TaskSlots


class Requests:
    """Requests for slots that each hold theirs until the test finishes them."""

    def __init__(self, slots: TaskSlots) -> None:
        self.slots = slots
        self.granted: list[str] = []  # tasks, in the order their requests got a slot
        self._done: list[asyncio.Event] = []
        self._tasks: list[asyncio.Task[None]] = []

    def ask(self, *tasks: str, first: bool = False) -> None:
        for name in tasks:
            done = asyncio.Event()
            self._done.append(done)
            self._tasks.append(asyncio.create_task(self._hold(name, done, first)))

    async def _hold(self, name: str, done: asyncio.Event, first: bool) -> None:
        async with self.slots.slot(name, first=first):
            self.granted.append(name)
            await done.wait()

    def finish(self, index: int) -> None:
        self._done[index].set()

    def cancel(self, index: int) -> None:
        self._tasks[index].cancel()


async def _settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def test_a_freed_slot_goes_to_the_task_with_fewest_in_flight_then_the_one_served_last() -> None:
    async def scenario() -> list[str]:
        r = Requests(TaskSlots(2))
        r.ask("a", "a", "a", "b", "b", "b", "c")  # all in one turn of the loop
        await _settle()
        assert r.granted == ["a", "b"]  # not a's three first
        r.finish(0)  # a has none in flight, as c: a was served last and keeps its slot
        await _settle()
        assert r.granted[-1] == "a"
        r.finish(3)  # b's first: b and c have none in flight, b was served last
        await _settle()
        assert r.granted[-1] == "b"
        return r.granted

    assert asyncio.run(scenario()) == ["a", "b", "a", "b"]


def test_slots_spread_over_as_many_tasks_as_there_are_slots() -> None:
    async def scenario() -> None:
        slots = TaskSlots(6)
        r = Requests(slots)
        for i in range(19):
            r.ask(*[f"t{i}"] * 3)
        await _settle()
        assert slots.in_flight() == {f"t{i}": 1 for i in range(6)}
        r.finish(2 * 3)  # t2's first request; t2 keeps its slot: its reference worker stays in use
        await _settle()
        assert slots.in_flight() == {f"t{i}": 1 for i in range(6)} and r.granted.count("t2") == 2

    asyncio.run(scenario())


def test_fewer_tasks_than_slots_share_them_evenly() -> None:
    async def scenario() -> None:
        slots = TaskSlots(6)
        r = Requests(slots)
        r.ask(*["a"] * 6, *["b"] * 6)
        await _settle()
        assert slots.in_flight() == {"a": 3, "b": 3}

    asyncio.run(scenario())


def test_a_cancelled_request_loses_no_slot() -> None:
    async def scenario() -> None:
        slots = TaskSlots(1)
        r = Requests(slots)
        r.ask("a", "b", "c")
        await _settle()
        r.cancel(1)  # b, waiting
        await _settle()
        r.finish(0)
        await _settle()
        assert r.granted == ["a", "c"] and slots.in_flight() == {"c": 1}
        r.finish(2)
        await _settle()
        assert slots.in_flight() == {}

    asyncio.run(scenario())


def test_requests_that_go_first_are_granted_before_every_other_whatever_their_task() -> None:
    async def scenario() -> list[str]:
        slots = TaskSlots(2)
        r = Requests(slots)
        r.ask("a", "a", "b", "b")
        r.ask("c", "c", "c", first=True)  # asked last, in the same turn of the loop
        await _settle()
        assert r.granted == ["c", "c"]  # c's two, though a and b have none in flight
        r.finish(4)  # c's first: c's third goes first too
        await _settle()
        assert r.granted[-1] == "c"
        r.ask("b", first=True)  # a later seed still overtakes a's and b's waiting requests
        r.finish(5)
        await _settle()
        assert r.granted[-1] == "b" and slots.in_flight() == {"b": 1, "c": 1}
        r.finish(6)
        r.finish(7)
        await _settle()
        return r.granted

    assert asyncio.run(scenario()) == ["c", "c", "c", "b", "a", "b"]


def test_capacity_is_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least one"):
        TaskSlots(0)


class WavePool:
    """A fake pool whose evaluations each wait until ``capacity`` are in flight: a loop that left
    a slot idle while work remained would never get past the barrier (it breaks after a minute,
    and the candidates stay pending). Records which tasks each wave held."""

    devices: Sequence[str] = ()

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.waves: list[Counter[str]] = []
        self._in_flight: list[str] = []
        self._lock = threading.Lock()
        self._barrier = threading.Barrier(capacity, action=self._wave, timeout=60)
        self._executor = ThreadPoolExecutor(capacity)

    def _wave(self) -> None:
        with self._lock:
            self.waves.append(Counter(self._in_flight))
            self._in_flight.clear()

    def submit(self, request: EvalRequest) -> Future[EvalResult]:
        with self._lock:
            self._in_flight.append(request.task.name)
        return self._executor.submit(self._evaluate, request)

    def _evaluate(self, request: EvalRequest) -> EvalResult:
        self._barrier.wait()
        return make_result(request.task.name, request.source, 1.0)

    def close(self) -> None:
        self._executor.shutdown()


class SeedsOnly:
    """Round 0 only: ``n`` distinct candidates per task."""

    last_round = 0
    backends: Sequence[object] = ()

    def __init__(self, n: int) -> None:
        self.n = n

    def seeds(self, task: Task) -> list[Proposal]:
        return [Proposal(f"s{i}", f"class ModelNew:  # {task.name} {i}\n    pass\n") for i in range(self.n)]

    def compositions(self, task: Task, r: int, rows: Sequence[object]) -> list[Proposal]:
        return []


def test_the_search_keeps_every_slot_busy_with_both_tasks_interleaved(tmp_path: Path) -> None:
    tasks = [GEMM_TASK, Task("other", GEMM_TASK.source, level=1)]
    pool = WavePool(4)
    with CandidateDB(tmp_path / "candidates.db") as db:
        search = Search(db, pool, SeedsOnly(6), Budget(BudgetConfig(), Ledger()))  # type: ignore[arg-type]
        asyncio.run(search.run(tasks))
        assert all(not db.pending(t.name) and len(db.evaluated(t.name)) == 6 for t in tasks)
    pool.close()
    # 12 candidates over 4 slots: three full waves, each with both tasks (FIFO ran 4 + 4 of one).
    assert [sum(w.values()) for w in pool.waves] == [4, 4, 4]
    assert all(w == Counter({"gemm_relu": 2, "other": 2}) for w in pool.waves)


class OrderPool:
    """A fake pool of one slot that records the labels in the order they are submitted."""

    devices: Sequence[str] = ()
    capacity = 1

    def __init__(self) -> None:
        self.submitted: list[str] = []

    def submit(self, request: EvalRequest) -> Future[EvalResult]:
        self.submitted.append(request.label)
        future: Future[EvalResult] = Future()
        future.set_result(make_result(request.task.name, request.source, 1.0))
        return future


class SeededRoundZero(SeedsOnly):
    """Round 0: ``n`` baselines per task, and the seeds ``seeds[task]`` (stored after them)."""

    def __init__(self, n: int, seeds: dict[str, int]) -> None:
        super().__init__(n)
        self.n_seeds = seeds

    def seeds(self, task: Task) -> list[Proposal]:
        seeds = [
            Proposal(f"seed:{task.name}:{i}", f"class ModelNew:  # seed {task.name} {i}\n", backend="seed")
            for i in range(self.n_seeds.get(task.name, 0))
        ]
        return [*super().seeds(task), *seeds]


TWO_TASKS = [GEMM_TASK, Task("other", GEMM_TASK.source, level=1)]


def test_round_zero_submits_every_tasks_seeds_before_any_baseline(tmp_path: Path) -> None:
    pool = OrderPool()
    plan = SeededRoundZero(3, {"gemm_relu": 1, "other": 2})
    with CandidateDB(tmp_path / "candidates.db") as db:
        search = Search(db, pool, plan, Budget(BudgetConfig(), Ledger()))  # type: ignore[arg-type]
        asyncio.run(search.run(TWO_TASKS))
        rows = sorted((r for t in TWO_TASKS for r in db.evaluated(t.name)), key=lambda r: r.id)
    seeds = ["seed:gemm_relu:0", "seed:other:0", "seed:other:1"]
    assert sorted(pool.submitted[:3]) == seeds and len(pool.submitted) == 9
    assert not any(label.startswith("seed:") for label in pool.submitted[3:])
    # the ids follow that order too: the seeds of both tasks, then the baselines
    assert [r.label for r in rows][:3] == seeds and [r.backend for r in rows][:3] == ["seed"] * 3


def test_a_resumed_search_submits_pending_seeds_before_other_pending_candidates(tmp_path: Path) -> None:
    pool = OrderPool()
    gemm, other = TWO_TASKS
    with CandidateDB(tmp_path / "candidates.db") as db:
        store = SeedsOnly(3).seeds(gemm)  # a killed session's round 0, left pending
        for p in store:
            db.add_candidate(gemm, p.source, Provenance(backend="baseline"), label=p.label)
        db.finish_round(other.name, 0)  # round 0 done; a late seed stored by the resumed session
        db.add_candidate(other, "class ModelNew:  # late\n", Provenance(backend="seed"), label="seed:late")
        search = Search(db, pool, SeedsOnly(3), Budget(BudgetConfig(), Ledger()))  # type: ignore[arg-type]
        asyncio.run(search.run(TWO_TASKS))
        assert not db.pending()
    assert pool.submitted == ["seed:late", "s0", "s1", "s2"]
