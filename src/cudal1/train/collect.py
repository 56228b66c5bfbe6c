"""Data collection for stage 1 (the paper's data augmentation): several models answer the one-shot
generation prompt for every task, and every answer is evaluated and stored with its provenance.

A collect run is a run directory like ``optimize``'s (``run/directory.py``): ``config.yaml``,
``candidates.db``, ``run.log``, ``llm-calls.jsonl``; ``cudal1 dataset export`` and ``runs show``
read it the same way. Round ``i`` of a task is the ``i``-th model's samples (round 0 holds only
the kernels given with ``--seed``: a collect run seeds no baselines), so the database's round
bookkeeping gives resume for free: a task first evaluates what was stored but not evaluated,
then asks the models whose round is not finished, and a round whose samples are already stored
is not sampled again.

The loop is the search's (``search.contrastive.Search``) with a ``CollectPlan``: budgets are checked
before every LLM call and every evaluation, an ``LLMError`` the backend could not retry stops the
run with everything stored kept, and progress goes to a ``ProgressCallback`` as the search's events.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cudal1.config import CollectConfig, LLMConfig
from cudal1.eval.pool_kinds import make_pool
from cudal1.llm import LLMBackend, SamplingParams, create_backend
from cudal1.run.directory import RunDirectory, RunError, add_wall_time, start_session
from cudal1.run.events import ProgressCallback, RunDone, RunStarted, TaskPlan
from cudal1.run.rows import CandidateRow
from cudal1.schema import Task
from cudal1.search.budget import Budget
from cudal1.search.contrastive import RoundRequest, Search, generation_prompt
from cudal1.search.lifecycle import Proposal
from cudal1.search.seeds import SeedSet, load_seeds, store_late_seeds


class CollectError(RunError):
    """A collect run that cannot start as asked; nothing was run."""


class CollectPlan:
    """Round 0 holds the kernels given as seeds (nothing else); round ``i`` asks the ``i``-th
    model the one-shot prompt."""

    def __init__(
        self, config: CollectConfig, models: Sequence[LLMBackend], seeds: SeedSet | None = None
    ) -> None:
        self.config, self.models = config, list(models)
        self.seed_set = seeds if seeds is not None else SeedSet()

    @property
    def last_round(self) -> int:
        return len(self.models)

    @property
    def backends(self) -> Sequence[LLMBackend]:
        return self.models

    def seeds(self, task: Task) -> list[Proposal]:
        return self.seed_set.for_task(task.name)

    def expected(self, task: Task) -> int:
        """Evaluations a task should see (for progress bars): its seeds and every model's samples."""
        return len(self.seeds(task)) + len(self.models) * self.config.samples

    def compositions(self, task: Task, r: int, rows: Sequence[CandidateRow]) -> list[Proposal]:
        return []  # collect keeps what the models wrote: a dataset of their kernels, not of wrappers

    def request(self, task: Task, r: int, rows: Sequence[CandidateRow]) -> RoundRequest:
        backend = self.models[r - 1]
        llm = self.config.llms[r - 1] if r <= len(self.config.llms) else LLMConfig()
        params = SamplingParams(
            temperature=llm.temperature, top_p=llm.top_p, max_tokens=llm.max_tokens, n=self.config.samples
        )
        return RoundRequest(backend, generation_prompt(task), params, label=f"{backend.name}-r{r}")


def collect(
    tasks: Sequence[Task],
    run_dir: Path,
    config: CollectConfig,
    *,
    resume: bool = False,
    backends: Sequence[LLMBackend] | None = None,
    seeds: SeedSet | None = None,
    progress: ProgressCallback | None = None,
) -> dict[str, Any]:
    """Ask every model for variants of every task, evaluate them, store everything in ``run_dir``.

    ``backends`` overrides ``config.llms`` (tests inject scripted ones); ``seeds`` are
    ``config.seed_files`` already loaded (round 0 holds them, as in ``optimize``). Returns
    per-task counts.
    """
    run = RunDirectory(run_dir)
    try:
        run.check_start(tasks, resume=resume)
    except RunError as exc:
        raise CollectError(str(exc)) from None
    seeds = seeds if seeds is not None else load_seeds(config.seed_files, tasks)
    models = list(backends) if backends is not None else _backends(config)
    if not models:
        raise CollectError("collect needs at least one model (--llm SPEC)")
    started = time.monotonic()
    with run.session() as db:
        run_id = start_session(db, run, tasks, config, note="collect resume" if resume else "collect")
        db.set_meta("llm", json.dumps([f"{b.name}:{b.model}" for b in models]))
        before = run.ledger_totals()
        ledger = run.ledger()
        for backend in models:
            backend.ledger = ledger
        budget = Budget.resumed(config.budget, ledger, before, db, tasks)
        plan = CollectPlan(config, models, seeds)
        store_late_seeds(db, tasks, seeds, run_id)
        if progress is not None:
            progress(
                RunStarted({t.name: TaskPlan(plan.expected(t), db.counts(t.name).dealt_with) for t in tasks})
            )
        try:
            with make_pool(config.eval, config.pool) as pool:
                search = Search(db, pool, plan, budget, progress=progress, run_id=run_id)
                asyncio.run(search.run(tasks))
        finally:  # a killed session's wall time counts too, as in optimize
            add_wall_time(db, time.monotonic() - started)
        db.set_meta("stop_reason", budget.stop_reason or "")
        counts = {t.name: db.counts(t.name) for t in tasks}
    if progress is not None:
        progress(RunDone(str(run.path)))
    return {name: c.__dict__ for name, c in counts.items()}


def _backends(config: CollectConfig) -> list[LLMBackend]:
    out = []
    for llm in config.llms:
        if llm.spec is None:
            raise CollectError("every model of a collect run needs a spec")
        try:
            out.append(create_backend(llm.spec, **llm.options))
        except (ValueError, ImportError) as exc:
            raise CollectError(f"--llm {llm.spec}: {exc}") from None
    return out
