"""Statistics of paired timing samples: pure functions, no clocks, no devices.

The speedup is the median of paired ratios ref/cand, each pair measured back to back in random
order, with a percentile-bootstrap 95% interval (shared/research/timing-and-anchors.md, section 2:
pairing cancels slow drifts of clock and temperature that independent medians would absorb).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RatioEstimate:
    median: float
    ci_low: float
    ci_high: float

    @property
    def rel_half_width(self) -> float:
        if self.median <= 0 or not math.isfinite(self.median):
            return math.inf
        return (self.ci_high - self.ci_low) / 2 / self.median


def with_floor(est: RatioEstimate, floor: float) -> RatioEstimate:
    """Widen the interval by a relative reproducibility floor, added in quadrature on each side.

    The bootstrap sees only the samples of one evaluation, i.e. of one pair of worker processes.
    Two processes running the very same code still differ slightly (memory placement, host
    state), so the same A-vs-A measurement repeated in fresh processes scatters more than one
    bootstrap interval admits; the floor is that scatter's 95% half-width.
    """
    if floor <= 0 or not math.isfinite(est.median):
        return est
    pad = floor * est.median
    return RatioEstimate(
        est.median,
        est.median - math.hypot(est.median - est.ci_low, pad),
        est.median + math.hypot(est.ci_high - est.median, pad),
    )


def paired_ratios(ref: list[float], cand: list[float]) -> np.ndarray:
    r, c = np.asarray(ref, dtype=float), np.asarray(cand, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = r / c
    return ratios[np.isfinite(ratios) & (ratios > 0)]


def bootstrap_median(ratios: np.ndarray, resamples: int, seed: int = 0) -> RatioEstimate:
    """Median of ``ratios`` and its percentile-bootstrap 95% interval."""
    n = len(ratios)
    if n == 0:
        return RatioEstimate(math.nan, math.nan, math.nan)
    med = float(np.median(ratios))
    if n == 1:
        return RatioEstimate(med, med, med)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n))
    meds = np.median(ratios[idx], axis=1)
    lo, hi = np.percentile(meds, [2.5, 97.5])
    return RatioEstimate(med, float(lo), float(hi))


def calls_per_sample(est_call_ms: float, tiny_call_ms: float, target_ms: float, cap: int) -> int:
    """K back-to-back calls per sample for tiny kernels, so that K calls take about ``target_ms``
    and launch gaps and timer resolution stop dominating; one call otherwise."""
    if not math.isfinite(est_call_ms) or est_call_ms <= 0:
        return cap
    if est_call_ms >= tiny_call_ms:
        return 1
    return max(1, min(cap, math.ceil(target_ms / est_call_ms)))


def median(xs: list[float]) -> float:
    return float(np.median(np.asarray(xs, dtype=float))) if xs else math.nan
