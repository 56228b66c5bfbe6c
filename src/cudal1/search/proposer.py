"""The built-in proposer: candidates that need no LLM, and the bars an LLM must clear.

Round 0's baselines are the built-in transforms (``transforms.py``) over the task's reference:
they go through the one evaluator, land in the database, seed contrastive prompts with real
numbers, and make the search useful on a machine with no LLM at all. After every round the same
transforms are composed over the round's best kernels (``compositions``), and a kernel rejected
only for process-wide state it left changed gets a repaired twin (``repair.py``).

On a CPU device the CUDA-only transforms (CUDA graphs, cuDNN flags, and the pairs holding them)
are never proposed: they run the wrapped program unchanged there, an A-vs-A measurement under a
baseline's name.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from cudal1.config import ComposeConfig, Transform
from cudal1.run.rows import CandidateRow
from cudal1.run.selection import REFERENCE_LABEL
from cudal1.schema import Task
from cudal1.search.lifecycle import Proposal
from cudal1.search.repair import REPAIRED, repairable, repaired_twin
from cudal1.search.transforms import TRANSFORMS, applies, apply_transform

log = logging.getLogger(__name__)

COMPOSE_BACKEND = "compose"  # the backend a composition step stores its candidates under
_LINK = " > "


def baseline_candidates(task: Task, *, cuda: bool = True) -> list[tuple[str, str]]:
    """(label, complete candidate source) for every transform that applies to the task's reference
    on a CUDA device (``cuda``) or a CPU."""
    labels = [label for label in TRANSFORMS if applies(task, label, cuda=cuda)]
    log.debug("task %s: baselines %s", task.name, ", ".join(labels))
    return [(label, apply_transform(task.source, label, of="Model")) for label in labels]


def origin_of(row: CandidateRow) -> str:
    """A candidate's provenance chain; an LLM's kernel, stored without one, is named by its label."""
    return row.origin or row.label


def is_base(label: str, origin: str, backend: str) -> bool:
    """Whether transforms are composed over a candidate: a seed, an LLM's kernel or a repaired
    twin; not the reference anchor, a built-in baseline or a composition (their last link is a
    transform: composing again only re-wraps the same program)."""
    last = origin.rsplit(_LINK, 1)[-1]
    if label == REFERENCE_LABEL or last in TRANSFORMS:
        return False
    return backend != COMPOSE_BACKEND or last == REPAIRED


def compositions_at_most(task: Task, bases: int, config: ComposeConfig, *, cuda: bool) -> int:
    """The most compositions a round with ``bases`` candidates to compose over gives (twins aside)."""
    if not config.enabled:
        return 0
    return min(config.top_k, bases) * sum(1 for t in config.transforms if applies(task, t, cuda=cuda))


def compositions(
    task: Task, r: int, rows: Sequence[CandidateRow], config: ComposeConfig, *, cuda: bool
) -> list[Proposal]:
    """Round ``r``'s composition step over the task's evaluated ``rows``: ``config.transforms``
    over the round's ``top_k`` fastest verified bases, and a repaired twin of each base of the
    round rejected only for process-wide state it left changed (twins are not twinned again)."""
    if not config.enabled:
        return []
    bases = [row for row in rows if row.round == r and is_base(row.label, origin_of(row), row.backend)]
    verified = sorted(
        (row for row in bases if row.correct and row.speedup is not None),
        key=lambda row: (-(row.speedup or 0.0), row.id),
    )[: config.top_k]
    labels = [label for label in config.transforms if applies(task, label, cuda=cuda)]
    out = [p for base in verified for label in labels if (p := _composed(base, label)) is not None]
    out += [
        p
        for row in bases
        if not origin_of(row).endswith(_LINK + REPAIRED) and repairable(row.result)
        if (p := _twin(row)) is not None
    ]
    return out


def _composed(base: CandidateRow, label: Transform) -> Proposal | None:
    try:
        source = apply_transform(base.source, label)
    except (ValueError, SyntaxError) as exc:
        log.info("%s: no %s over candidate %d: %s", base.task, label, base.id, exc)
        return None
    return Proposal(f"{label}@{base.id}", source, origin=origin_of(base) + _LINK + label, base_id=base.id)


def _twin(row: CandidateRow) -> Proposal | None:
    try:
        source = repaired_twin(row.source)
    except (ValueError, SyntaxError) as exc:
        log.info("%s: no repaired twin of candidate %d: %s", row.task, row.id, exc)
        return None
    return Proposal(f"{REPAIRED}@{row.id}", source, origin=origin_of(row) + _LINK + REPAIRED, base_id=row.id)
