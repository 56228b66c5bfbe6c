"""Paired, interleaved timing of a reference and a candidate, with a clock the candidate cannot touch.

One sample = for each side, in random order: ``prepare`` (one untimed call and a device sync,
outside the clock), then an L2 flush and a short GPU spin queued ahead of the begin event, then K
back-to-back calls timed twice: by the worker (CUDA events, or its own clock on
CPU) and by the evaluator's clock around the request, minus the measured round trip. The worker
replies only after a device-wide synchronize and sends a digest of its last output with the
reply, so work finished late or left on a side stream lands inside the trusted wall time, and
an output computed only when asked for cannot match the digest sent inside the timed window.

The clock and the endpoints are parameters, so this logic is tested on CPU with fakes.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from cudal1.config import TimingConfig
from cudal1.eval.timing import stats


class Endpoint(Protocol):
    """One side of a paired measurement (a worker, or a fake in tests)."""

    def warmup(self, min_calls: int, min_ms: float) -> tuple[int, float]: ...
    def round_trip_ms(self) -> float: ...
    def prepare(self) -> None: ...
    def start(self, calls: int, first_set: int) -> None: ...
    def finish(self) -> tuple[float, list[Any]]: ...


# check(sample, input_set, digests) -> failure reason or None; called for sampled candidate calls.
OutputCheck = Callable[[int, int, list[Any]], str | None]


@dataclass
class PairedOutcome:
    calls_per_sample: int
    ref_ms: list[float] = field(default_factory=list)
    cand_ms: list[float] = field(default_factory=list)
    ref_wall_ms: list[float] = field(default_factory=list)
    cand_wall_ms: list[float] = field(default_factory=list)
    checked: int = 0
    failures: list[str] = field(default_factory=list)
    stop_reason: str = ""
    estimate: stats.RatioEstimate = stats.RatioEstimate(math.nan, math.nan, math.nan)
    wall_estimate: stats.RatioEstimate = stats.RatioEstimate(math.nan, math.nan, math.nan)

    def gap_ms(self) -> tuple[float, float]:
        """Median (trusted wall - worker time) per call, reference and candidate."""
        ref = [w - e for w, e in zip(self.ref_wall_ms, self.ref_ms, strict=True)]
        cand = [w - e for w, e in zip(self.cand_wall_ms, self.cand_ms, strict=True)]
        return stats.median(ref), stats.median(cand)


def measure_paired(
    ref: Endpoint,
    cand: Endpoint,
    cfg: TimingConfig,
    n_sets: int,
    check: OutputCheck,
    *,
    clock: Callable[[], float] = time.perf_counter,
    rng: random.Random | None = None,
) -> PairedOutcome:
    rng = rng or random.Random()
    k = _choose_calls(ref, cand, cfg, clock)
    rtt = {id(ref): ref.round_trip_ms(), id(cand): cand.round_trip_ms()}
    out = PairedOutcome(calls_per_sample=k)
    started = clock()
    sample = 0
    while True:
        first_set = rng.randrange(n_sets)
        order = [(ref, False), (cand, True)]
        rng.shuffle(order)
        for side, is_cand in order:
            side.prepare()
            t0 = clock()
            side.start(k, first_set)
            worker_ms, digests = side.finish()
            wall = (clock() - t0) * 1000 - rtt[id(side)]
            (out.cand_ms if is_cand else out.ref_ms).append(worker_ms / k)
            (out.cand_wall_ms if is_cand else out.ref_wall_ms).append(max(wall, 1e-9) / k)
            if is_cand and _should_check(sample, out.checked, cfg, rng):
                out.checked += 1
                failure = check(sample, (first_set + k - 1) % n_sets, digests)
                if failure:
                    out.failures.append(failure)
        sample += 1
        if out.failures:
            out.stop_reason = "output_check_failed"
            break
        elapsed = clock() - started
        if sample >= cfg.max_samples or (elapsed >= cfg.budget_s and sample >= 3):
            reason: str | None = "max_samples" if sample >= cfg.max_samples else "budget"
        elif sample >= cfg.min_samples and sample % 10 == 0:
            # The bootstrap costs milliseconds: run it every ten samples, or the GPU idles
            # between samples, its clock drops, and the samples get noisy (seen on the H100).
            out.estimate = _estimate(
                out.ref_ms, out.cand_ms, cfg, resamples=min(400, cfg.bootstrap_resamples)
            )
            reason = "precision" if out.estimate.rel_half_width <= cfg.target_rel_ci else None
        else:
            reason = None
        if reason:
            out.stop_reason = reason
            break
    # The stop rule above judges the sampling error alone; the reported interval adds the
    # between-process reproducibility floor.
    out.estimate = stats.with_floor(_estimate(out.ref_ms, out.cand_ms, cfg), cfg.reproducibility_floor)
    out.wall_estimate = stats.with_floor(
        _estimate(out.ref_wall_ms, out.cand_wall_ms, cfg), cfg.reproducibility_floor
    )
    if not out.failures:
        _final_check(out, cand, k, n_sets, check, rng, sample)
    return out


def _choose_calls(ref: Endpoint, cand: Endpoint, cfg: TimingConfig, clock: Callable[[], float]) -> int:
    """Warm both sides by count and by time, then pick K from the trusted per-call estimate."""
    estimates = []
    for side in (ref, cand):
        t0 = clock()
        calls, _ = side.warmup(cfg.warmup_calls, cfg.warmup_ms)
        wall_ms = (clock() - t0) * 1000 - side.round_trip_ms()
        estimates.append(max(wall_ms, 1e-6) / max(calls, 1))
    return stats.calls_per_sample(
        min(estimates), cfg.tiny_call_ms, cfg.sample_target_ms, cfg.max_calls_per_sample
    )


def _should_check(sample: int, checked: int, cfg: TimingConfig, rng: random.Random) -> bool:
    # Always the first sample, then a few at random: the candidate learns which only afterwards.
    # Few, because fetching a large output leaves the GPU idle and its clock drops.
    return sample == 0 or (checked < cfg.max_output_checks and rng.random() < cfg.check_output_fraction)


def _final_check(
    out: PairedOutcome,
    cand: Endpoint,
    k: int,
    n_sets: int,
    check: OutputCheck,
    rng: random.Random,
    sample: int,
) -> None:
    """One more timed-style call whose output is certainly checked, after all the samples."""
    first_set = rng.randrange(n_sets)
    cand.prepare()
    cand.start(k, first_set)
    _, digests = cand.finish()
    out.checked += 1
    failure = check(sample, (first_set + k - 1) % n_sets, digests)
    if failure:
        out.failures.append(failure)


def _estimate(
    ref: list[float], cand: list[float], cfg: TimingConfig, resamples: int | None = None
) -> stats.RatioEstimate:
    return stats.bootstrap_median(stats.paired_ratios(ref, cand), resamples or cfg.bootstrap_resamples)
