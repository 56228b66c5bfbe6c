"""Round 0 of a task: the candidates a run starts from before any model has written one.

``seed_candidates`` gives the kernels given with ``--seed`` (``load_seeds``), the built-in
proposer's baselines (``proposer.py``), and the reference anchor: the task's own program as a
candidate labelled ``reference``, an A-vs-A measurement whose speedup should be 1.0, so that
every other number of the task can be read against the evaluator's own noise.
``store_seeds_first`` and ``store_round_zero`` put them in a run's database (the search's round
0, collect's round 0, GRPO's first prompts), the seeds of every task before anything else: they
are evaluated first too, so a run cut short has measured the published kernels.

Seeds (issue 20: the bar is the best of torch.compile and the best published kernel, so a run
starts from the published kernels): ``tasks.seed_files`` reads and matches the files; here each
kernel becomes a round-0 ``Proposal`` labelled ``seed:<label>`` (unique per task), with the origin
chain ``seed <where>`` (``seed cuda-l1:h100``), its claimed speedup and backend ``seed``. A seed is
evaluated like every other candidate: one that fails or is rejected is recorded with its findings
and is never kept (``run.selection.choose_best`` keeps only accepted results). A resumed run
given seeds it does not have yet stores them as pending round-0 candidates (``store_late_seeds``),
which the search evaluates first.
"""

from __future__ import annotations

import ast
import dataclasses
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cudal1.run.database import CandidateDB
from cudal1.run.directory import RunError
from cudal1.run.rows import CandidateRow, Provenance
from cudal1.run.selection import REFERENCE_LABEL
from cudal1.schema import Candidate, Task, source_hash
from cudal1.search.lifecycle import Proposal, store_proposals
from cudal1.search.proposer import baseline_candidates
from cudal1.tasks import TaskError, match_seed_files

log = logging.getLogger(__name__)

SEED_BACKEND = "seed"  # ``Provenance.backend`` of a kernel given with --seed


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        if node.name == self.old:
            node.name = self.new
        self.generic_visit(node)
        return node

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id == self.old:
            node.id = self.new
        return node


def reference_anchor(task: Task) -> str:
    """The task's own program as a candidate: ``class Model`` renamed ``ModelNew`` (by ``ast``)."""
    return ast.unparse(_Rename("Model", "ModelNew").visit(ast.parse(task.source))) + "\n"


def seed_candidates(
    task: Task, labels: Sequence[str] | None, seeds: Sequence[Proposal] = (), *, cuda: bool = True
) -> list[Proposal]:
    """Round 0's proposals: the ``seeds`` given for the task (first: they are evaluated first),
    the chosen built-in baselines that apply on a CUDA device (``cuda``) or a CPU, then the
    reference anchor."""
    baselines = [
        Proposal(lbl, src, origin=lbl)
        for lbl, src in baseline_candidates(task, cuda=cuda)
        if labels is None or lbl in labels
    ]
    return [*seeds, *baselines, Proposal(REFERENCE_LABEL, reference_anchor(task), origin=REFERENCE_LABEL)]


def is_seed(backend: str) -> bool:
    """Whether a proposal's or a row's backend says it is a kernel given with --seed."""
    return backend == SEED_BACKEND


def seeds_first(rows: Sequence[CandidateRow]) -> list[CandidateRow]:
    """``rows`` with the seeds before the others, each part in its order (a resumed stage's
    pending candidates, to evaluate in that order)."""
    return sorted(rows, key=lambda r: not is_seed(r.backend))


def store_seeds_first(
    db: CandidateDB, proposals: Sequence[tuple[Task, Sequence[Proposal]]], provenance: Provenance
) -> int:
    """Store several tasks' round-0 ``proposals`` in one transaction, the seeds of every task
    before anything else of any task, so that the ids follow the order in which the search
    submits them (seeds first). Returns how many seeds there were."""
    with db.transaction():
        for seeds in (True, False):
            for task, props in proposals:
                chosen = [p for p in props if is_seed(p.backend) is seeds]
                if chosen:
                    store_proposals(db, task, chosen, provenance)
    return sum(is_seed(p.backend) for _, props in proposals for p in props)


# -- seeds given with --seed -------------------------------------------------------------------------


class SeedError(RunError):
    """A seed file that cannot be used (unreadable, malformed, or seeding none of the run's
    tasks); nothing was run."""


@dataclass(frozen=True)
class SeedSet:
    """The seeds of a session: each task's round-0 proposals, and what matching skipped."""

    proposals: Mapping[str, tuple[Proposal, ...]] = field(default_factory=dict)  # by task name
    files: tuple[Path, ...] = ()
    skipped: tuple[str, ...] = ()  # records named like a run task, with another reference
    without_code: int = 0  # matching records that hold no kernel

    def for_task(self, name: str) -> list[Proposal]:
        return list(self.proposals.get(name, ()))

    @property
    def count(self) -> int:
        return sum(len(p) for p in self.proposals.values())


def load_seeds(paths: Sequence[Path], tasks: Sequence[Task]) -> SeedSet:
    """The seeds ``paths`` hold for ``tasks`` (``tasks.seed_files``), as proposals; SeedError
    when a file cannot be read, is malformed or seeds none of the tasks."""
    if not paths:
        return SeedSet()
    try:
        match = match_seed_files(paths, tasks)
    except TaskError as exc:
        raise SeedError(f"seed file {exc}") from None
    proposals = {name: tuple(seed_proposals(kernels)) for name, kernels in match.kernels.items()}
    for name, props in proposals.items():
        log.info("%s: %d seed(s): %s", name, len(props), ", ".join(p.label for p in props))
    return SeedSet(proposals, tuple(Path(p) for p in paths), match.skipped, match.without_code)


def seed_proposals(kernels: Sequence[Candidate]) -> list[Proposal]:
    """One task's seed kernels as round-0 proposals, labelled ``seed:<label>`` (unique: a repeat
    gets ``#2``, ``#3``...) with the origin chain ``seed <where>``."""
    labels = _unique_labels([_prefixed(k.label or "file", "seed:") for k in kernels], ())
    return [
        Proposal(
            label,
            k.source,
            origin=_prefixed(k.origin or k.label or "file", "seed "),
            claimed_speedup=k.claimed_speedup,
            backend=SEED_BACKEND,
        )
        for k, label in zip(kernels, labels, strict=True)
    ]


def _prefixed(text: str, prefix: str) -> str:
    # A kernel exported by a run that was itself seeded already says it is a seed.
    return text if text.startswith(prefix) else prefix + text


def _unique_labels(labels: Sequence[str], taken: Collection[str]) -> list[str]:
    """``labels`` with a ``#n`` suffix where one repeats an earlier one or one in ``taken``."""
    used, out = set(taken), []
    for label in labels:
        n, unique = 1, label
        while unique in used:
            n += 1
            unique = f"{label}#{n}"
        used.add(unique)
        out.append(unique)
    return out


def store_late_seeds(db: CandidateDB, tasks: Sequence[Task], seeds: SeedSet, run_id: int | None) -> int:
    """Store the seeds of tasks whose round 0 is already finished (a resumed run given new
    seeds) as pending round-0 candidates, which the search evaluates first; tasks still in round
    0 get theirs from the plan. Returns how many were new."""
    return sum(
        store_seeds(db, task, seeds.for_task(task.name), run_id)
        for task in tasks
        if db.rounds_done(task.name) > 0
    )


def store_seeds(db: CandidateDB, task: Task, proposals: Sequence[Proposal], run_id: int | None) -> int:
    """Store the seed ``proposals`` that ``task`` does not have yet, as pending round-0
    candidates, relabelled where an earlier seed took the label. Returns how many were stored."""
    new = [p for p in proposals if db.find_by_hash(task.name, source_hash(p.source)) is None]
    if not new:
        return 0
    taken = {r.label for r in db.evaluated(task.name) + db.pending(task.name)}
    labels = _unique_labels([p.label for p in new], taken)
    relabelled = [dataclasses.replace(p, label=label) for p, label in zip(new, labels, strict=True)]
    store_proposals(db, task, relabelled, Provenance(round=0, backend=SEED_BACKEND, run_id=run_id))
    log.info("%s: %d new seed(s) stored for evaluation", task.name, len(new))
    return len(new)


def store_round_zero(
    db: CandidateDB,
    tasks: Mapping[str, Task],
    seeds: SeedSet,
    run_id: int | None,
    *,
    baselines: bool,
    labels: Sequence[str] | None,
    cuda: bool = True,
) -> None:
    """Round 0 of a stage that has no rounds of its own (GRPO, before its first prompts): every
    task gets the seeds it does not have yet (a resumed run may be given new ones), then tasks
    that had no candidate get the built-in baselines ``labels`` and the reference (when
    ``baselines``). Everything is left pending, for the caller to evaluate in the order of its
    ids: the seeds of every task first. ``cuda``: whether candidates are timed on a CUDA device
    (a CPU gets no CUDA-only baselines)."""
    empty = [t for t in tasks.values() if baselines and not db.counts(t.name).total]
    with db.transaction():
        for task in tasks.values():
            store_seeds(db, task, seeds.for_task(task.name), run_id)
        for task in empty:
            proposals = seed_candidates(task, labels, cuda=cuda)
            store_proposals(db, task, proposals, Provenance(backend="baseline", run_id=run_id))
