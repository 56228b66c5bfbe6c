"""Evaluate stored candidates on the pool and record the results: what every training stage does
with the samples it stored (self-supervised rounds, GRPO rewards, seeds, a killed run's pending).

Candidates are stored before they are evaluated and their results are recorded one by one as
they come back, so a kill loses at most the evaluations in flight; a resumed stage evaluates
what is still pending first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence

from cudal1.eval.pool import Pool
from cudal1.schema import EvalResult, Task
from cudal1.search.contrastive import evaluate_and_record, seed_candidates
from cudal1.search.database import CandidateDB, CandidateRow, DuplicateSourceError, Provenance

log = logging.getLogger(__name__)


async def evaluate_rows(
    db: CandidateDB, pool: Pool, tasks: Mapping[str, Task], rows: Sequence[CandidateRow]
) -> dict[int, EvalResult]:
    """Evaluate ``rows`` (pending candidates) all at once; record and return each result by id.

    An evaluator error leaves its candidate pending (it is retried by the next session) and has
    no entry in the returned mapping.
    """
    if not rows:
        return {}

    async def one(row: CandidateRow) -> tuple[int, EvalResult | None]:
        return row.id, await evaluate_and_record(pool, db, tasks[row.task], row)

    done = await asyncio.gather(*(one(r) for r in rows))
    return {i: r for i, r in done if r is not None}


def seed_tasks(
    db: CandidateDB, tasks: Sequence[Task], run_id: int, labels: Sequence[str] | None = None
) -> None:
    """Store the built-in baselines and the reference anchor of each task that has no candidate
    yet, so that the first contrastive prompts have measured variants to compare."""
    with db.transaction():
        for task in tasks:
            if db.counts(task.name).total:
                continue
            for label, source in seed_candidates(task, labels):
                with contextlib.suppress(DuplicateSourceError):
                    db.add_candidate(task, source, Provenance(backend="baseline", run_id=run_id), label=label)
