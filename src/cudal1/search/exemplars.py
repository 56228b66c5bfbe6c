"""Choose the earlier variants that a contrastive prompt shows, the way the paper describes.

Contrast needs spread: a prompt that shows four near-identical 1.9x variants teaches nothing
about *why* something is fast. So the correct, accepted variants of a task are bucketed by
speedup (fixed edges, or quantiles of what the task has), distinct buckets are sampled (the top
bucket always, so the best level known is in view), and within a bucket a variant is drawn by a
temperature softmax on log-speedup (log, because speedups are ratios: 2x over 1x is as much
progress as 4x over 2x). Near-duplicate sources (token Jaccard above a threshold) are skipped,
and optionally one failed variant is shown with its error so the model sees a mistake to avoid.
Everything is drawn from a caller's ``random.Random``: the same seed gives the same prompt.
"""

from __future__ import annotations

import bisect
import logging
import math
import random
import re
from collections.abc import Sequence

from cudal1.config import ExemplarConfig
from cudal1.run.rows import CandidateRow
from cudal1.schema import Severity
from cudal1.search.prompts import Exemplar

log = logging.getLogger(__name__)

_TOKEN = re.compile(r"[A-Za-z_]\w*|\d+(?:\.\d+)?|\S")
_MAX_NOTES = 3


def _tokens(source: str) -> frozenset[str]:
    return frozenset(_TOKEN.findall(source))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 1.0


def _edges(speedups: list[float], config: ExemplarConfig) -> list[float]:
    if config.bucketing == "edges":
        return sorted(config.bucket_edges)
    s = sorted(speedups)
    n = config.quantile_buckets
    return sorted({s[min(len(s) - 1, (i * len(s)) // n)] for i in range(1, n)})


def _buckets(rows: list[CandidateRow], config: ExemplarConfig) -> list[list[CandidateRow]]:
    """Non-empty speedup buckets, slowest first."""
    edges = _edges([r.speedup or 0.0 for r in rows], config)
    by_index: dict[int, list[CandidateRow]] = {}
    for r in rows:
        by_index.setdefault(bisect.bisect_right(edges, r.speedup or 0.0), []).append(r)
    return [by_index[i] for i in sorted(by_index)]


def _softmax_draw(rows: list[CandidateRow], temperature: float, rng: random.Random) -> CandidateRow:
    logits = [math.log(max(r.speedup or 0.0, 1e-9)) / temperature for r in rows]
    top = max(logits)
    weights = [math.exp(v - top) for v in logits]
    return rng.choices(rows, weights=weights, k=1)[0]


def _bucket_order(n_buckets: int, rng: random.Random) -> list[int]:
    """Top bucket first, then the others in random order."""
    rest = list(range(n_buckets - 1))
    rng.shuffle(rest)
    return [n_buckets - 1, *rest]


def _pick_scored(
    rows: list[CandidateRow], n: int, config: ExemplarConfig, rng: random.Random
) -> list[CandidateRow]:
    """Up to n diverse variants, one per bucket per pass, top bucket first in every pass."""
    buckets = _buckets(rows, config)
    order = _bucket_order(len(buckets), rng)
    chosen: list[CandidateRow] = []
    chosen_tokens: list[frozenset[str]] = []
    remaining = [list(b) for b in buckets]
    while len(chosen) < n and any(remaining):
        for i in order:
            while remaining[i] and len(chosen) < n:
                row = _softmax_draw(remaining[i], config.temperature, rng)
                remaining[i].remove(row)
                tokens = _tokens(row.source)
                if any(jaccard(tokens, t) > config.diversity_threshold for t in chosen_tokens):
                    log.debug("exemplar %d skipped: near-duplicate of a chosen variant", row.id)
                    continue
                chosen.append(row)
                chosen_tokens.append(tokens)
                break
    return chosen


def _failure_reason(row: CandidateRow) -> str:
    result = row.result
    if result is None:
        return "not evaluated"
    if result.failed_stage is not None:
        return f"{result.failed_stage.value} stage failed: {result.error or 'no message'}"
    rejecting = [f.message for f in result.findings if f.severity is Severity.REJECT]
    if rejecting:
        return "rejected: " + "; ".join(rejecting)
    if result.correctness is not None and not result.correctness.ok:
        return f"wrong outputs: {result.correctness.message or 'outputs differ from the reference'}"
    return "not timed"


def to_exemplar(row: CandidateRow) -> Exemplar:
    """The prompt's view of a stored candidate: speedup or failure reason, plus evaluator notes."""
    result = row.result
    notes = (
        []
        if result is None
        else [f"{f.code}: {f.message}" for f in result.findings if f.severity is not Severity.INFO]
    )
    ok = row.speedup is not None
    sol = result.sol if result is not None else None
    ref_ms = result.timing.ref_median_ms if result is not None and result.timing is not None else None
    return Exemplar(
        source=row.source,
        speedup=row.speedup,
        correct=ok,
        findings=notes[:_MAX_NOTES],
        label=f"#{row.id}" + (f" {row.label}" if row.label else ""),
        error="" if ok else _failure_reason(row),
        candidate_id=row.id,
        sol_percent=sol.cand_percent if sol is not None else None,
        bound=sol.bound(ref_ms) if sol is not None and ref_ms is not None else None,
    )


def select_exemplars(
    rows: Sequence[CandidateRow], config: ExemplarConfig, rng: random.Random
) -> list[Exemplar]:
    """Pick up to ``config.k`` exemplars from a task's evaluated candidates.

    Returned slowest first and the failed one (if any) first of all, so the fastest variant
    sits next to the protocol that asks to beat it.
    """
    scored = sorted((r for r in rows if r.speedup is not None and r.correct), key=lambda r: r.id)
    failed = sorted((r for r in rows if r.result_json is not None and r.speedup is None), key=lambda r: r.id)
    n_failed = 1 if config.include_failed and failed and (config.k > 1 or not scored) else 0
    picked = _pick_scored(scored, config.k - n_failed, config, rng) if scored else []
    picked.sort(key=lambda r: (r.speedup or 0.0, r.id))
    if n_failed:
        picked.insert(0, rng.choice(failed))
    return [to_exemplar(r) for r in picked]
