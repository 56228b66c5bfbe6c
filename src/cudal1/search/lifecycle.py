"""A candidate's life, one path for every stage (the search, ``collect``, the self-supervised
rounds, GRPO's reward): stored with its provenance, evaluated on the pool, its result recorded.

- ``store_reply`` stores a model reply's ``ModelNew`` as a pending candidate (or the reply as a
  parse failure); ``store_proposals`` stores sources the caller already has (``Proposal``: a
  built-in baseline, a published kernel given as a seed, a transform of a verified candidate),
  each with where it came from.
  A source the task already has is never stored twice: the existing candidate, and its result,
  stand for it.
- ``evaluate_and_record`` / ``evaluate_rows`` evaluate pending candidates on the pool and record
  each result as it comes back.

Candidates are stored before they are evaluated and results recorded one by one, so a kill loses
at most the evaluations in flight; a resumed stage evaluates what is still pending first. An
exception from the evaluator itself leaves its candidate pending for the next session: the
trusted side's failures are never a candidate's result.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cudal1.eval.pool import Pool
from cudal1.run.database import CandidateDB, DuplicateSourceError
from cudal1.run.rows import CandidateRow, Provenance
from cudal1.run.selection import why_not_ok
from cudal1.schema import EvalRequest, EvalResult, Task
from cudal1.search.parsing import extract

log = logging.getLogger(__name__)


def store_reply(
    db: CandidateDB, task: Task, text: str, provenance: Provenance, *, label: str
) -> tuple[int, str | None]:
    """Store one model reply: its ``ModelNew`` as a pending candidate, or the reply as a parse
    failure. Returns the row's id (the existing one when the task already has this source) and
    the parse error (None when a candidate was stored or already existed)."""
    ex = extract(text)
    if not ex.ok or ex.code is None:
        error = ex.error or "no code"
        return db.record_parse_failure(task, text, error, provenance, analysis=ex.analysis), error
    try:
        return db.add_candidate(task, ex.code, provenance, label=label, analysis=ex.analysis), None
    except DuplicateSourceError as exc:
        log.info("%s: %s repeats candidate %d", task.name, label, exc.existing_id)
        return exc.existing_id, None


@dataclass(frozen=True)
class Proposal:
    """A candidate source that no model reply produced, with where it came from."""

    label: str
    source: str
    origin: str = ""  # the chain, as ``Provenance.origin``
    base_id: int | None = None  # the candidate a transform was applied to
    claimed_speedup: float | None = None  # what the source's publisher claimed
    # Its kind where it differs from the session's ``Provenance.backend``: "seed" for a kernel
    # given with --seed, stored in round 0 beside the built-in baselines; "": the session's.
    backend: str = ""


def store_proposals(
    db: CandidateDB, task: Task, proposals: Sequence[Proposal], provenance: Provenance
) -> list[int]:
    """Store ``proposals`` as pending candidates in one transaction, each with ``provenance`` plus
    its own origin (and backend, where it names one); a source the task already has keeps its
    row (a seed stored by an earlier session). Returns the rows' ids, in order."""
    ids: list[int] = []
    with db.transaction():
        for p in proposals:
            prov = dataclasses.replace(
                provenance,
                origin=p.origin,
                base_id=p.base_id,
                claimed_speedup=p.claimed_speedup,
                backend=p.backend or provenance.backend,
            )
            try:
                ids.append(db.add_candidate(task, p.source, prov, label=p.label))
            except DuplicateSourceError as exc:
                ids.append(exc.existing_id)
    return ids


async def evaluate_and_record(
    pool: Pool, db: CandidateDB, task: Task, row: CandidateRow
) -> EvalResult | None:
    """Evaluate one stored candidate on the pool and record its result. An exception from the
    evaluator itself leaves the candidate pending, for a resumed run: None."""
    future = pool.submit(EvalRequest(task, row.source, request_id=str(row.id), label=row.label))
    try:
        result = await asyncio.wrap_future(future)
    except Exception:
        log.exception("evaluator raised on %s candidate %d; left pending", task.name, row.id)
        return None
    db.record_result(row.id, result)
    verdict = f"{result.speedup:.3f}x" if result.speedup is not None else f"not ok: {why_not_ok(result)}"
    log.info("%s #%d %s (round %d, step %s): %s", task.name, row.id, row.label, row.round, row.step, verdict)
    return result


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
