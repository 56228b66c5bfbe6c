"""Data collection for stage 1 (the paper's data augmentation): several models answer the one-shot
generation prompt for every task, and every answer is evaluated and stored with its provenance.

A collect run is a run directory like ``optimize``'s (``search/optimize.py``): ``config.yaml``,
``candidates.db``, ``run.log``, ``llm-calls.jsonl``; ``cudal1 dataset export`` and ``runs show``
read it the same way. Round ``i`` of a task is the ``i``-th model's samples (round 0 is empty: a
collect run seeds no baselines), so the database's round bookkeeping gives resume for free: a
task first evaluates what was stored but not evaluated, then asks the models whose round is not
finished, and a round whose samples are already stored is not sampled again.

Budgets (``BudgetConfig``) are checked before every LLM call and every evaluation, as in the
search; an ``LLMError`` the backend could not retry stops the run with everything stored kept.
Progress goes to a ``ProgressCallback`` with the search's event kinds, and to the run's log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cudal1.config import CollectConfig, LLMConfig, dump_config
from cudal1.eval.pool import Pool
from cudal1.eval.pool_kinds import make_pool
from cudal1.llm import BudgetExceeded, Ledger, LLMBackend, Message, SamplingParams, create_backend
from cudal1.schema import Task
from cudal1.search.contrastive import (
    Budget,
    ProgressCallback,
    device_seconds,
    evaluate_and_record,
    result_fields,
    store_reply,
)
from cudal1.search.database import CandidateDB, CandidateRow, Provenance
from cudal1.search.optimize import (
    CONFIG_FILE,
    DB_FILE,
    LEDGER_FILE,
    LOG_FILE,
    OptimizeError,
    check_start,
    ledger_totals,
    remember_tasks,
    run_log,
)
from cudal1.search.prompts import prompt_hash, render_generation_prompt

log = logging.getLogger(__name__)


class CollectError(Exception):
    """A collect run that cannot start as asked; nothing was run."""


def collect(
    tasks: Sequence[Task],
    run_dir: Path,
    config: CollectConfig,
    *,
    resume: bool = False,
    backends: Sequence[LLMBackend] | None = None,
    progress: ProgressCallback | None = None,
) -> dict[str, Any]:
    """Ask every model for variants of every task, evaluate them, store everything in ``run_dir``.

    ``backends`` overrides ``config.llms`` (tests inject scripted ones). Returns per-task counts.
    """
    run_dir = Path(run_dir)
    try:
        check_start(tasks, run_dir, resume)
    except OptimizeError as exc:
        raise CollectError(str(exc)) from None
    models = list(backends) if backends is not None else _backends(config)
    if not models:
        raise CollectError("collect needs at least one model (--llm SPEC)")
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with run_log(run_dir / LOG_FILE), CandidateDB(run_dir / DB_FILE) as db:
        remember_tasks(db, tasks)
        (run_dir / CONFIG_FILE).write_text(dump_config(config), encoding="utf-8")
        run_id = db.start_run(dump_config(config), note="collect resume" if resume else "collect")
        db.set_meta("llm", json.dumps([f"{b.name}:{b.model}" for b in models]))
        before = ledger_totals(run_dir / LEDGER_FILE)
        ledger = Ledger(run_dir / LEDGER_FILE)
        for backend in models:
            backend.ledger = ledger
        spent = sum(device_seconds(r.result) for t in tasks for r in db.evaluated(t.name) if r.result)
        budget = Budget(
            config.budget,
            ledger,
            tokens_before=before["prompt_tokens"] + before["completion_tokens"],
            cost_before=before["cost_usd"],
            gpu_seconds=spent,
        )
        if progress is not None:
            total = len(models) * config.samples
            plan = {t.name: {"total": total, "done": _done(db, t.name)} for t in tasks}
            progress("run_start", {"tasks": plan})
        with make_pool(config.eval, config.pool) as pool:
            collector = _Collector(db, pool, config, budget, models, progress, run_id)
            asyncio.run(collector.run(tasks))
        wall = float(db.get_meta("wall_s") or 0) + time.monotonic() - started
        db.set_meta("wall_s", f"{wall:.3f}")
        db.set_meta("stop_reason", budget.stop_reason or "")
        counts = {t.name: db.counts(t.name) for t in tasks}
    if progress is not None:
        progress("run_done", {"run_dir": str(run_dir)})
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


def _done(db: CandidateDB, task: str) -> int:
    counts = db.counts(task)
    return counts.evaluated + counts.parse_failed


class _Collector:
    """One session over a set of tasks: each task an asyncio task, its rounds (models) in order."""

    def __init__(
        self,
        db: CandidateDB,
        pool: Pool,
        config: CollectConfig,
        budget: Budget,
        models: list[LLMBackend],
        progress: ProgressCallback | None,
        run_id: int,
    ) -> None:
        self.db, self.pool, self.config, self.budget = db, pool, config, budget
        self.models, self.progress, self.run_id = models, progress, run_id
        self._slots = asyncio.Semaphore(pool.capacity)

    def emit(self, kind: Any, **payload: Any) -> None:
        if self.progress is not None:
            self.progress(kind, payload)

    async def run(self, tasks: Sequence[Task]) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                for task in tasks:
                    group.create_task(self.run_task(task))
        except BaseExceptionGroup as failures:
            exc: BaseException = failures
            while isinstance(exc, BaseExceptionGroup):
                exc = exc.exceptions[0]
            raise exc from None
        finally:
            for backend in self.models:
                await backend.aclose()

    async def run_task(self, task: Task) -> None:
        if self.db.rounds_done(task.name) == 0:
            self.db.finish_round(task.name, 0)  # round 0 holds no seeds in a collect run
        await self._evaluate(task, self.db.pending(task.name))
        while (r := self.db.rounds_done(task.name)) <= len(self.models):
            if self.budget.exhausted(llm=True) is not None:
                self.emit("stopped", reason=self.budget.stop_reason)
                return
            stored = any(row.round == r for row in self.db.evaluated(task.name) + self.db.pending(task.name))
            if not stored and not await self._sample(task, r, self.models[r - 1]):
                return
            await self._evaluate(task, self.db.pending(task.name))
            if any(row.round == r for row in self.db.pending(task.name)):
                return  # a budget stopped the evaluations; a resumed run finishes them
            self.db.finish_round(task.name, r)
            self.emit("round_done", task=task.name, round=r)

    async def _sample(self, task: Task, r: int, backend: LLMBackend) -> bool:
        messages = render_generation_prompt(task)
        llm = self.config.llms[r - 1] if r <= len(self.config.llms) else LLMConfig()
        params = SamplingParams(
            temperature=llm.temperature, top_p=llm.top_p, max_tokens=llm.max_tokens, n=self.config.samples
        )
        try:
            chat = [Message(m["role"], m["content"]) for m in messages]  # type: ignore[arg-type]
            completions = await backend.complete(chat, params)
        except BudgetExceeded:
            self.budget.stop("max_cost_usd")
            return False
        log.info("%s: %d samples from %s:%s", task.name, len(completions), backend.name, backend.model)
        errors = []
        with self.db.transaction():  # a kill leaves all of a call's replies or none
            for i, c in enumerate(completions):
                prov = Provenance(
                    round=r,
                    prompt_hash=prompt_hash(messages),
                    backend=backend.name,
                    model=c.model,
                    prompt_tokens=c.prompt_tokens,
                    completion_tokens=c.completion_tokens,
                    run_id=self.run_id,
                )
                _, error = store_reply(self.db, task, c.text, prov, label=f"{backend.name}-r{r}-s{i}")
                if error is not None:
                    errors.append(error)
        for error in errors:
            self.emit("parse_failed", task=task.name, round=r, error=error, done=_done(self.db, task.name))
        return True

    async def _evaluate(self, task: Task, rows: Sequence[CandidateRow]) -> None:
        if rows:
            await asyncio.gather(*(self._evaluate_one(task, row) for row in rows))

    async def _evaluate_one(self, task: Task, row: CandidateRow) -> None:
        async with self._slots:
            if self.budget.exhausted(llm=False) is not None:
                return
            result = await evaluate_and_record(self.pool, self.db, task, row)
            if result is None:
                return
        self.budget.add(result)
        best = self.db.best(task.name)
        self.emit(
            "evaluated",
            task=task.name,
            id=row.id,
            label=row.label,
            round=row.round,
            **result_fields(result),
            best_speedup=best.speedup if best else None,
            best_label=best.label if best else None,
            done=_done(self.db, task.name),
        )
