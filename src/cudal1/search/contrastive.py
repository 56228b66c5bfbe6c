"""The per-task loop: propose, evaluate, remember, and ask again with the numbers.

``Search`` runs it for every run that samples models against the candidate database: ``optimize``
(``ContrastivePlan``: round 0 seeds the task with the built-in baselines and the reference anchor,
each later round asks the run's model with the contrastive prompt) and ``collect`` (its plan asks
the ``i``-th model for round ``i`` with the one-shot prompt). A plan says what each round asks;
the loop, its budget checks, its resume and its progress events are this module's, and every
candidate goes through the one life cycle of ``lifecycle.py``.

Each LLM round draws the plan's samples from one call, extracts each reply's ``ModelNew``, stores
it (or the parse failure), evaluates the new candidates on the pool and records the results; the
next round sees them. With no LLM, round 0 is the search.

Every round ends with a composition step: once the round's own candidates are evaluated, the plan
proposes candidates built from them (``SearchPlan.compositions``: for ``optimize``, the built-in
transforms over the round's best kernels and repaired twins, ``proposer.compositions``); they are
stored under the round's number (backend ``compose``), evaluated, and asked for again with the
new results, until the plan proposes nothing new (a repaired twin's transforms come on the second
pass). Only then is the round finished.

Concurrency: every task runs as its own asyncio task, so one task's LLM call overlaps another
task's evaluations; evaluations are pool futures awaited through ``asyncio.wrap_future``, at
most ``pool.capacity`` in flight so that a budget stops the run promptly instead of after a
queue drains. A freed slot goes to the waiting task with the fewest evaluations in flight
(``slots.TaskSlots``), not to whichever task queued first: the slots spread over the tasks. A task's rounds are sequential: a round's prompt needs the previous round's numbers.

Seeds first: the kernels given with ``--seed`` are the bar a run must beat, so a run cut short
should have measured them. Round 0 of every task is stored before any task starts, the seeds of
all tasks before anything else (their ids come first), and an evaluation of a seed asks its slot
to go ``first``: every seed of every task, pending ones of a resumed run included, is submitted
before any baseline, the reference anchor or a composition.

Resume: the database is the state. A task first evaluates whatever is stored but pending
(samples of a round that was killed mid-evaluation), then continues at ``rounds_done``; a round
whose samples are already stored is not sampled again, and its composition step runs again: the
same compositions are the same sources, which keep their stored rows. Budgets are checked before
every LLM call and every evaluation (``budget.py``); work already under way finishes and is
recorded; a round with candidates left pending (its compositions included) stays unfinished.
An ``LLMError`` the backend could not retry stops the whole run (everything stored stays).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from cudal1.config import ExemplarConfig, OptimizeConfig
from cudal1.eval.devices import resolve_device
from cudal1.eval.pool import Pool
from cudal1.llm import BudgetExceeded, Completion, LLMBackend, Message, SamplingParams
from cudal1.run.database import CandidateDB
from cudal1.run.events import Evaluated, ParseFailed, ProgressCallback, RoundDone, Stopped
from cudal1.run.rows import CandidateRow, Provenance
from cudal1.run.selection import choose_best
from cudal1.schema import Task
from cudal1.search.budget import Budget
from cudal1.search.exemplars import select_exemplars
from cudal1.search.lifecycle import Proposal, evaluate_and_record, store_proposals, store_reply
from cudal1.search.prompts import prompt_hash, render_contrastive_prompt, render_generation_prompt
from cudal1.search.proposer import COMPOSE_BACKEND, compositions, compositions_at_most, is_base
from cudal1.search.seeds import SeedSet, is_seed, seed_candidates, store_seeds_first
from cudal1.search.slots import TaskSlots

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskPrompt:
    """The prompt a task gets next: contrastive when it has a correct variant, else one-shot."""

    messages: list[dict[str, str]]
    contrastive: bool
    parents: tuple[int, ...]  # database ids of the exemplars shown (empty for a one-shot prompt)
    exemplar_labels: tuple[str, ...]


def task_prompt(
    task: Task, rows: Sequence[CandidateRow], config: ExemplarConfig, rng: random.Random
) -> TaskPrompt:
    """The prompt for ``task`` from its evaluated candidates ``rows``: exemplars selected with
    ``rng``, rendered contrastively once one of them is correct (the search and GRPO share this)."""
    exemplars = select_exemplars(rows, config, rng)
    if not any(e.correct for e in exemplars):
        return generation_prompt(task)
    return TaskPrompt(
        render_contrastive_prompt(task, exemplars, show_speedups=config.show_speedups),
        True,
        tuple(e.candidate_id for e in exemplars if e.candidate_id is not None),
        tuple(e.label for e in exemplars),
    )


def generation_prompt(task: Task) -> TaskPrompt:
    """The one-shot prompt: the task alone, no earlier variants."""
    return TaskPrompt(render_generation_prompt(task), False, (), ())


@dataclass(frozen=True)
class RoundRequest:
    """What one LLM round of a task asks: which model, with which prompt and sampling."""

    backend: LLMBackend
    prompt: TaskPrompt
    params: SamplingParams
    label: str  # a sample's label is ``{label}-s{i}``


class SearchPlan(Protocol):
    """What each round of a task asks; ``Search`` does the rest."""

    @property
    def last_round(self) -> int: ...

    @property
    def backends(self) -> Sequence[LLMBackend]: ...

    def seeds(self, task: Task) -> list[Proposal]:
        """Round 0's candidates."""
        ...

    def request(self, task: Task, r: int, rows: Sequence[CandidateRow]) -> RoundRequest:
        """LLM round ``r`` (>= 1) of ``task``, given its evaluated candidates ``rows``."""
        ...

    def compositions(self, task: Task, r: int, rows: Sequence[CandidateRow]) -> list[Proposal]:
        """Candidates built from round ``r``'s, given the task's evaluated candidates ``rows``
        (asked again after each batch is evaluated; a repeated source keeps its row)."""
        ...


class ContrastivePlan:
    """``optimize``'s rounds: round 0 holds the built-in baselines, the kernels given as seeds
    (``seeds.SeedSet``) and the reference anchor; later rounds ask the run's model with the
    contrastive prompt."""

    def __init__(
        self, config: OptimizeConfig, backend: LLMBackend | None, seeds: SeedSet | None = None
    ) -> None:
        self.config, self.backend = config, backend
        self.seed_set = seeds if seeds is not None else SeedSet()
        self.cuda = _times_on_cuda(config)

    @property
    def last_round(self) -> int:
        return self.config.rounds if self.backend is not None else 0

    @property
    def backends(self) -> Sequence[LLMBackend]:
        return [] if self.backend is None else [self.backend]

    def expected(self, task: Task) -> int:
        """Evaluations a task should see (for progress bars): seeds, every LLM sample, and at most
        the compositions over each round's best (fewer when fewer kernels verify; repaired twins
        are not foreseen)."""
        seeds = self.seeds(task)
        kernels = sum(1 for p in seeds if is_base(p.label, p.origin or p.label, "baseline"))
        compose, cuda, n = self.config.compose, self.cuda, self.config.samples
        composed = compositions_at_most(task, kernels, compose, cuda=cuda)
        composed += self.last_round * compositions_at_most(task, n, compose, cuda=cuda)
        return len(seeds) + self.last_round * n + composed

    def seeds(self, task: Task) -> list[Proposal]:
        return seed_candidates(
            task, self.config.baseline_labels, self.seed_set.for_task(task.name), cuda=self.cuda
        )

    def compositions(self, task: Task, r: int, rows: Sequence[CandidateRow]) -> list[Proposal]:
        return compositions(task, r, rows, self.config.compose, cuda=self.cuda)

    def request(self, task: Task, r: int, rows: Sequence[CandidateRow]) -> RoundRequest:
        assert self.backend is not None
        rng = random.Random(f"{self.config.seed}:{task.name}:{r}")
        prompt = task_prompt(task, rows, self.config.exemplars, rng)
        llm = self.config.llm
        params = SamplingParams(
            temperature=llm.temperature, top_p=llm.top_p, max_tokens=llm.max_tokens, n=self.config.samples
        )
        return RoundRequest(self.backend, prompt, params, label=f"llm-r{r}")


class Search:
    """One session of the loop over a set of tasks; ``await run(tasks)`` inside an event loop."""

    def __init__(
        self,
        db: CandidateDB,
        pool: Pool,
        plan: SearchPlan,
        budget: Budget,
        *,
        progress: ProgressCallback | None = None,
        run_id: int | None = None,
    ) -> None:
        self.db, self.pool, self.plan, self.budget = db, pool, plan, budget
        self.progress, self.run_id = progress, run_id
        self._slots: TaskSlots | None = None
        self._reported: set[str] = set()

    def _exhausted(self, *, llm: bool) -> bool:
        """Whether a budget forbids the next LLM call (``llm``) or evaluation; reported once each."""
        reason = self.budget.exhausted(llm=llm)
        if reason and reason not in self._reported:
            self._reported.add(reason)
            if self.progress is not None:
                self.progress(Stopped(reason))
        return reason is not None

    async def run(self, tasks: Sequence[Task]) -> None:
        self._slots = TaskSlots(self.pool.capacity)
        self._store_round_zero(tasks)
        try:
            async with asyncio.TaskGroup() as group:
                for task in tasks:
                    group.create_task(self.run_task(task), name=f"search:{task.name}")
        except BaseExceptionGroup as failures:
            raise _first_leaf(failures) from None
        finally:
            for backend in self.plan.backends:
                await backend.aclose()

    def _store_round_zero(self, tasks: Sequence[Task]) -> None:
        """Round 0's candidates of every task that has not finished it, stored before any task
        starts: the kernels given as seeds, of every task, first (``seeds.store_seeds_first``), so
        that ids follow the order in which they are evaluated. Nothing when a budget is spent."""
        todo = [t for t in tasks if self.db.rounds_done(t.name) == 0]
        if not todo or self._exhausted(llm=False):
            return
        prov = Provenance(round=0, backend="baseline", run_id=self.run_id)
        seeds = store_seeds_first(self.db, [(t, self.plan.seeds(t)) for t in todo], prov)
        if seeds:
            log.info("round 0: %d seed kernel(s) go before the other candidates of every task", seeds)

    async def run_task(self, task: Task) -> None:
        await self._evaluate(task, self.db.pending(task.name))
        while (r := self.db.rounds_done(task.name)) <= self.plan.last_round:
            if self._exhausted(llm=r > 0):
                break
            finished = await (self._seed_round(task) if r == 0 else self._llm_round(task, r))
            if not finished:
                break

    # -- rounds ----------------------------------------------------------------------------------

    async def _seed_round(self, task: Task) -> bool:
        # Round 0's candidates were stored by ``_store_round_zero``.
        await self._evaluate(task, self.db.pending(task.name))
        await self._compose(task, 0)
        return self._finish_round(task, 0)

    async def _llm_round(self, task: Task, r: int) -> bool:
        stored = any(row.round == r for row in self.db.evaluated(task.name) + self.db.pending(task.name))
        if not stored:  # a killed session may have stored this round's samples already
            request = self.plan.request(task, r, self.db.evaluated(task.name))
            prompt = request.prompt
            log.info(
                "%s round %d: %s prompt to %s:%s, exemplars %s",
                task.name,
                r,
                "contrastive" if prompt.contrastive else "generation",
                request.backend.name,
                request.backend.model,
                list(prompt.exemplar_labels),
            )
            try:
                completions = await request.backend.complete(_chat(prompt.messages), request.params)
            except BudgetExceeded:
                self.budget.stop("max_cost_usd")
                return False
            self._store(task, r, completions, request)
        await self._evaluate(task, self.db.pending(task.name))
        await self._compose(task, r)
        return self._finish_round(task, r)

    async def _compose(self, task: Task, r: int) -> None:
        """Round ``r``'s composition step: store what the plan builds from the round's evaluated
        candidates, evaluate it, and ask again until nothing new is proposed. Proposals a killed
        session stored already keep their rows; what a budget leaves pending keeps the round
        unfinished (``_finish_round``), and a resumed run evaluates it, then composes again."""
        prov = Provenance(round=r, backend=COMPOSE_BACKEND, run_id=self.run_id)
        known: set[int] = set()
        while True:
            proposals = self.plan.compositions(task, r, self.db.evaluated(task.name))
            new = set(store_proposals(self.db, task, proposals, prov)) - known
            if not new:
                return
            known |= new
            log.info("%s round %d: composing %s", task.name, r, [p.label for p in proposals])
            await self._evaluate(task, self.db.pending(task.name))

    def _store(self, task: Task, r: int, completions: list[Completion], request: RoundRequest) -> None:
        """A round's replies in one transaction: a kill leaves all of them or none."""
        failures: list[str] = []
        phash = prompt_hash(request.prompt.messages)
        with self.db.transaction():
            for i, c in enumerate(completions):
                prov = Provenance(
                    round=r,
                    parent_ids=request.prompt.parents,
                    prompt_hash=phash,
                    backend=request.backend.name,
                    model=c.model,
                    prompt_tokens=c.prompt_tokens,
                    completion_tokens=c.completion_tokens,
                    run_id=self.run_id,
                )
                _, error = store_reply(self.db, task, c.text, prov, label=f"{request.label}-s{i}")
                if error is not None:
                    log.info("%s round %d sample %d: %s", task.name, r, i, error)
                    failures.append(error)
        if self.progress is not None:  # after the commit: a callback that raises cannot undo the round
            for error in failures:
                self.progress(ParseFailed(task.name, r, error, self._done(task)))

    def _finish_round(self, task: Task, r: int) -> bool:
        left = [row.id for row in self.db.pending(task.name) if row.round == r]
        if left:
            if not self._exhausted(llm=False):
                log.error(
                    "%s round %d: candidates %s left pending; a resumed run retries them", task.name, r, left
                )
            return False
        self.db.finish_round(task.name, r)
        if self.progress is not None:
            self.progress(RoundDone(task.name, r))
        return True

    # -- evaluation ------------------------------------------------------------------------------

    async def _evaluate(self, task: Task, rows: Sequence[CandidateRow]) -> None:
        if rows:
            async with asyncio.TaskGroup() as group:
                for row in rows:
                    group.create_task(self._evaluate_one(task, row))

    async def _evaluate_one(self, task: Task, row: CandidateRow) -> None:
        assert self._slots is not None
        async with self._slots.slot(task.name, first=is_seed(row.backend)):
            if self._exhausted(llm=False):
                return
            result = await evaluate_and_record(self.pool, self.db, task, row)
            if result is None:
                return
        self.budget.add(result)
        if self.progress is not None:
            best = choose_best(self.db.evaluated(task.name))
            self.progress(Evaluated.of(row, result, best, self._done(task)))

    def _done(self, task: Task) -> int:
        """Samples dealt with so far (evaluated or unparseable): a progress bar's position."""
        return self.db.counts(task.name).dealt_with


def _times_on_cuda(config: OptimizeConfig) -> bool:
    """Whether the run's candidates are timed on a CUDA device (a Ray pool's actors each hold one)."""
    devices = config.pool.devices or (config.eval.device,)
    return config.pool.kind == "ray" or any(resolve_device(d) != "cpu" for d in devices)


def _chat(messages: list[dict[str, str]]) -> list[Message]:
    return [Message(cast(Any, m["role"]), m["content"]) for m in messages]


def _first_leaf(group: BaseExceptionGroup) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc
