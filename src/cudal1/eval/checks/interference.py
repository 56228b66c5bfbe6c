"""``reference_disturbed``: the reference's own times show that work of the candidate's ran beside it.

While the reference is timed, the candidate's worker is stopped (``timing/paired.py``: SIGSTOP of
its process group from the start of the reference's turn to its own next request), so no thread
or child process of the candidate's runs on the host then. GPU work it queued before it stopped
still runs, and on one GPU the work of two processes time-slices: a candidate that leaves a few
milliseconds of kernels behind after its turn slows the reference's next turn, and so its own
speedup (issue 21: a candidate that kept the GPU busy while the reference was timed was verified
at ~1.4x on an H100, with only warnings).

Evidence, from trusted numbers only (the reference worker's own clock, and the evaluator's
around each of its requests), in the samples of each group (the long-lead samples; the short-lead
ones apart): the reference's times right after the candidate ran (its turn, or any request to it)
against its *clean* times, those of turns that followed its own with the candidate stopped
throughout (a reference turn after a reference turn, and the turns timed again at once:
``PairedOutcome.ref_again_ms``). Which samples are which comes from the evaluator's random order,
which the candidate learns only after the fact, so a difference is the candidate's doing, not the
machine's: a slow drift or a noisy neighbour falls on both kinds alike (and the paired ratio
absorbs it; ``checks.drift`` warns of a reference slower than its baseline). A slowdown that
cannot be put down to the candidate this way is never held against it.

The statistic: a one-sided Mann-Whitney rank test that the after-candidate times, less
``SLOWDOWN_MARGIN``, are still larger than the clean ones, exact for small groups; a finding
(REJECT, ``Stage.INTEGRITY``) when p <= ``ALPHA`` on either clock of either group.
- ``SLOWDOWN_MARGIN`` 10%: honest samples differ by order too (a turn after the other process
  starts from another context on the GPU, from other branch-predictor and cache state on the
  CPU; ``prepare`` absorbs most of it, by design: without it the second side of a pair ran up to
  35% slower on the H200), so only a slowdown beyond 10% counts. What a candidate can gain below
  the margin is at most about that much.
- ``ALPHA`` 1e-3 per test (four at most): a rank test needs no model of the noise (GPU samples
  are tight, CPU ones heavy-tailed), and the margin puts honest pairs far from the boundary, so
  their chance of a false finding is far below alpha. With ~8 clean samples against ~22 (30
  pairs) the smallest p is ~3e-7, so a candidate that slows every following turn by 20% is found
  even with CPU-sized noise (tests/eval/timing/test_interference.py).

What is not covered:
- GPU work that outlasts the reference's whole turn and more (a spin a candidate keeps queued
  until its own next request, cancelled then from the host) slows clean and after-candidate turns
  alike; telling it needs the device's word that no other context ran (a probe of preemption on
  the reference's side, or the driver's), which this module does not have;
- with fewer than ``MIN_SAMPLES`` of either kind (budget stops on slow tasks), no verdict;
- a process of the candidate's that left the worker's process group (``setsid``) is not
  stopped, and could run beside the reference, or continue the stopped group (SIGCONT), whenever
  it sees the worker stopped, a slowdown that falls on clean turns too. It is found instead
  (``WorkerProcess.outside_group``: the worker's descendants and what carries its sandbox as
  TMPDIR, looked for before, during and after the sampling) and rejected as such; one that
  rewrote its environment after a double fork, or lived only between two looks, is not found.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from cudal1.eval.timing.paired import PairedOutcome
from cudal1.schema import Finding, Severity, Stage

SLOWDOWN_MARGIN = 0.10
ALPHA = 1e-3
MIN_SAMPLES = 3
# Up to this many (after, clean) pairs the rank statistic's null distribution is computed exactly
# (about 20 ms at the limit); beyond, both groups hold ~50 samples or more and the normal
# approximation is close.
EXACT_PAIRS = 5000

SampleGroup = Literal["main", "launch"]
ClockName = Literal["events", "wall"]


@dataclass(frozen=True)
class OrderComparison:
    """The reference's times after the candidate ran against its clean ones, in one group of
    samples on one clock (per call, ms)."""

    samples: SampleGroup
    clock: ClockName
    after: int  # how many samples of each kind
    clean: int
    after_ms: float  # their medians
    clean_ms: float
    slowdown: float  # after_ms / clean_ms - 1
    p: float  # that the after-candidate samples exceed the clean ones by more than the margin


def reference_disturbed(
    out: PairedOutcome, outside_group: Sequence[int] = ()
) -> tuple[Finding | None, dict[str, Any]]:
    """The finding, when the reference's times after the candidate are beyond its clean ones by
    more than the margin on any clock of any group, or when processes the candidate started had
    left its worker's process group (``outside_group``: the pause cannot stop them); and the main
    group's event comparison as a fact for the result (``Environment.reference_disturbance``),
    finding or not."""
    groups: tuple[tuple[SampleGroup, PairedOutcome | None], ...] = (("main", out), ("launch", out.launch))
    comparisons = [c for samples, outcome in groups if outcome is not None for c in _compare_group(samples, outcome)]
    worst = min(comparisons, key=lambda c: c.p, default=None)
    facts = _facts(comparisons[0]) if comparisons and comparisons[0].samples == "main" else {}
    evidence: dict[str, Any] = {"margin": SLOWDOWN_MARGIN, "alpha": ALPHA}
    evidence["comparisons"] = [_facts(c) for c in comparisons]
    if outside_group:
        message = (
            f"{len(outside_group)} process(es) the candidate started left its worker's process group, "
            "so they ran on while the worker was stopped for the reference's turns"
        )
        evidence["outside_group"] = list(outside_group)[:20]
    elif worst is not None and worst.p <= ALPHA:
        message = (
            f"the reference ran {worst.slowdown:+.0%} slower right after the candidate than in its "
            f"clean turns with the candidate stopped ({worst.after} and {worst.clean} {worst.samples} "
            f"samples, {worst.clock}; rank test p={worst.p:.1g} for more than {SLOWDOWN_MARGIN:.0%}): "
            "work the candidate left behind ran on the device while the reference was timed"
        )
        evidence.update(_facts(worst))
    else:
        return None, facts
    return Finding("reference_disturbed", Severity.REJECT, Stage.INTEGRITY, message, evidence), facts


def _compare_group(samples: SampleGroup, out: PairedOutcome) -> list[OrderComparison]:
    found = []
    clocks: tuple[tuple[ClockName, list[float], list[float]], ...] = (
        ("events", out.ref_ms, out.ref_again_ms),
        ("wall", out.ref_wall_ms, out.ref_again_wall_ms),
    )
    for clock, times, again in clocks:
        after = [t for t, ran in zip(times, out.ref_after_cand, strict=True) if ran]
        clean = [t for t, ran in zip(times, out.ref_after_cand, strict=True) if not ran] + again
        if len(after) < MIN_SAMPLES or len(clean) < MIN_SAMPLES:
            continue
        after_ms, clean_ms = float(np.median(after)), float(np.median(clean))
        found.append(
            OrderComparison(
                samples=samples,
                clock=clock,
                after=len(after),
                clean=len(clean),
                after_ms=after_ms,
                clean_ms=clean_ms,
                slowdown=after_ms / clean_ms - 1 if clean_ms > 0 else math.inf,
                p=slower_beyond(after, clean, SLOWDOWN_MARGIN),
            )
        )
    return found


def _facts(c: OrderComparison) -> dict[str, Any]:
    return {k: (float(f"{v:.6g}") if isinstance(v, float) else v) for k, v in asdict(c).items()}


def slower_beyond(after: Sequence[float], clean: Sequence[float], margin: float) -> float:
    """One-sided p-value that ``after`` is slower than ``clean`` by more than ``margin``: the
    Mann-Whitney test of ``after / (1 + margin)`` against ``clean`` (positive times). Ties count
    half, and the exact tail is taken from the tie's lower end, which errs toward no finding."""
    x = np.log(np.asarray(after, dtype=float)) - math.log1p(margin)
    y = np.log(np.asarray(clean, dtype=float))
    m, n = len(x), len(y)
    if m == 0 or n == 0:
        return 1.0
    u = float(np.sum(x[:, None] > y[None, :]) + 0.5 * np.sum(x[:, None] == y[None, :]))
    if m * n <= EXACT_PAIRS:
        return float(_rank_tail(m, n)[math.floor(u)])
    mean, sd = m * n / 2, math.sqrt(m * n * (m + n + 1) / 12)
    return 0.5 * math.erfc((u - 0.5 - mean) / sd / math.sqrt(2))


@functools.lru_cache(maxsize=64)
def _rank_tail(m: int, n: int) -> np.ndarray:
    """P(U >= u) for u = 0..m*n, U the number of (x, y) pairs with x > y among m x's and n y's
    drawn from one continuous distribution. By the largest of the i + j values: an x with
    probability i / (i + j), beating all j y's, else a y: P[i,j](u) = i/(i+j) P[i-1,j](u-j) +
    j/(i+j) P[i,j-1](u)."""
    prev = [np.ones(1) for _ in range(n + 1)]  # i = 0: U = 0 whatever j
    for i in range(1, m + 1):
        row = [np.ones(1)]  # j = 0
        for j in range(1, n + 1):
            dist = np.zeros(i * j + 1)
            above = prev[j]
            dist[j : j + len(above)] += i / (i + j) * above
            left = row[j - 1]
            dist[: len(left)] += j / (i + j) * left
            row.append(dist)
        prev = row
    return np.cumsum(prev[n][::-1])[::-1]
