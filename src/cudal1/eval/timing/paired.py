"""Paired, interleaved timing of a reference and a candidate, with a clock the candidate cannot touch.

One sample = fresh timed inputs for both sides (new values from a new secret seed, at new
addresses: an output computed earlier, or cached under any key, is wrong for them), then for each
side, in random order: ``prepare`` (one untimed call on the warm-up inputs and a device sync,
outside the clock), an L2 flush and a short GPU spin queued ahead of the begin event, then K
back-to-back calls timed twice: by the worker (CUDA events, or its own clock on CPU) and by the
evaluator's clock around the request, minus the measured round trip. The worker replies only
after a device-wide synchronize, so work finished late or left on a side stream lands inside the
trusted wall time; the digest of its last output follows in a second message, after the trusted
clock has stopped (hashing a large output took milliseconds that one side paid more than the
other: CUDA-L1 record L1_81 read 0.73x for an event ratio of 1.5x), and an output computed only
when fetched later cannot match it.

What the speedup means: the median over paired samples of the reference's time per call over
the candidate's, each the steady-state time of K back-to-back calls on the worker's clock (CUDA
events on the current stream), with the host's launches queued ahead of the GPU (``host_ahead``):
a spin before the begin event lasts long enough for the host to launch all K calls, so the GPU
runs them back to back and the host's launch time is outside the figure, as in nvbench's cold
measurements and inside a larger model, where the host runs ahead. Two worker processes running
the same code launch at speeds up to 5% apart, for as long as they live (H100, A-vs-A of
launch-bound tasks: 0.97-1.05 between fresh processes on one CPU), so a launch-bound ratio with
the host inside it is not reproducible to the precision goal. Beside it: ``launch_speedup`` from
a few pairs with only the short lead (the host's launch time inside, where the GPU waits for
it), and the trusted wall clock's ratio ``wall_speedup`` (the lead and the synchronisation
inside, for hidden-work checks). A worker reports when its host fell behind the spin; the lead
then doubles, and the count is kept (``host_behind``).

The reference is timed undisturbed: from the start of its turn (its ``prepare``) until the
candidate's next request, the candidate's worker stands still (``Endpoint.pause``: SIGSTOP of its
process group, so no thread or child of it runs while the reference is timed; a worker resumes
only when it is next sent a request). GPU work it queued before it stopped still runs; each
reference sample records whether the candidate ran since the reference's previous turn
(``ref_after_cand``), and after a turn that followed the candidate's, the reference is sometimes
timed once more at once, the candidate still stopped (``ref_again_ms``): ``checks.interference``
compares the two kinds of the reference's own times (``reference_disturbed``).

What is not covered: with calls under ~15 us, K exceeds the 64 fresh sets a sample gets, so a
set repeats within a sample and a cache keyed on its address or values hits for the repeats.

The clock and the endpoints are parameters, so this logic is tested on CPU with fakes.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

from cudal1.config import TimingConfig
from cudal1.eval.timing import stats
from cudal1.schema import TimingStopReason


class Endpoint(Protocol):
    """One side of a paired measurement (a worker, or a fake in tests)."""

    def warmup(self, min_calls: int, min_ms: float) -> tuple[int, float]: ...
    def round_trip_ms(self) -> float: ...
    def prepare(self) -> None: ...

    host_ahead: bool  # whether the last sample's launches were all queued before the GPU got to them

    def start(self, calls: int, first_set: int, lead_us: float | None = None) -> None: ...
    def finish(self) -> float: ...  # the worker's own time; the trusted clock stops on this reply
    def digests(self) -> list[Any]: ...  # of the last timed output, read after the clock stopped
    # The candidate's side stands still while the reference runs: ``pause`` stops it and says
    # whether it may have run since the last ``resume``; after ``resume`` it runs again at its
    # next request at the latest.
    def pause(self) -> bool: ...
    def resume(self) -> None: ...


# check(sample, digests) -> failure reason or None: the candidate's last timed output, fetched
# afterwards, against these digests and the reference's output of the same sample.
OutputCheck = Callable[[int, list[Any]], str | None]
# refresh(sample, calls) -> input sets per sample: both sides get fresh timed inputs before each
# sample (new values from a new seed, at new addresses), so that no output can be reused.
Refresh = Callable[[int, int], int]
# After a reference turn that followed the candidate's, the chance that the reference is timed
# once more at once, the candidate still stopped: clean samples of the reference to compare the
# others with (``checks.interference``), in random places, so a slow drift of the machine falls
# on both kinds alike. A quarter: about as many as the after-the-candidate samples need for the
# rank test there at 30 samples, for about 12% more sampling time.
REFERENCE_AGAIN = 0.25


@dataclass
class PairedOutcome:
    calls_per_sample: int
    ref_ms: list[float] = field(default_factory=list)
    cand_ms: list[float] = field(default_factory=list)
    ref_wall_ms: list[float] = field(default_factory=list)
    cand_wall_ms: list[float] = field(default_factory=list)
    # Per reference sample: whether the candidate ran (its turn, or any request of it) since the
    # reference's previous turn; and the reference's extra turns right after its own (per call).
    ref_after_cand: list[bool] = field(default_factory=list)
    ref_again_ms: list[float] = field(default_factory=list)
    ref_again_wall_ms: list[float] = field(default_factory=list)
    checked: int = 0
    failures: list[str] = field(default_factory=list)
    stop_reason: TimingStopReason | None = None  # None: not stopped by the rule (the extra pairs)
    sampling_s: float = 0.0  # time in timed pairs: what the budget counts (checks, refreshes, ref_again not)
    lead_us: float | None = None  # the spin ahead of each sample (None: the worker's default)
    host_behind: int = 0  # samples where a side's host did not queue all its calls ahead
    launch_estimate: stats.RatioEstimate | None = None  # with the launches on the clock
    # The short-lead pairs themselves: the trusted clock is checked on them, since work a candidate
    # hides on another stream runs during a long lead, where neither clock can see it.
    launch: PairedOutcome | None = None
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
    check: OutputCheck,
    refresh: Refresh,
    *,
    clock: Callable[[], float] = time.perf_counter,
    rng: random.Random | None = None,
) -> PairedOutcome:
    """Sample until the interval is precise enough, the sample cap, or the budget. The budget
    counts the timed pairs only: output checks and input refreshes (seconds for large outputs)
    must not starve the measurement, and it stops no earlier than ``budget_min_samples``
    unless the whole stage has run ``3 x budget_s``."""
    rng = rng or random.Random()
    k, host_ms = _choose_calls(ref, cand, cfg, clock)
    rtt = {id(ref): ref.round_trip_ms(), id(cand): cand.round_trip_ms()}
    out = PairedOutcome(calls_per_sample=k)
    if cfg.host_ahead:
        # Long enough for the slower host to queue all K calls (its warm-up time per call, which
        # includes the GPU's, so it errs long); doubled whenever a side reports it fell behind.
        out.lead_us = cfg.lead_us + min(cfg.max_lead_ms, 1.5 * k * host_ms) * 1000
    started = clock()
    sample = 0
    while True:
        digests, behind = _sample(out, ref, cand, rtt, refresh(sample, k), rng, clock)
        if behind and out.lead_us is not None:  # a host fell behind the spin: lengthen it
            out.host_behind += 1
            out.lead_us = min(2 * out.lead_us, 4000 * cfg.max_lead_ms)
        if _should_check(sample, out.checked, cfg, rng):
            _check(out, check, sample, digests)
        sample += 1
        reason = _stop_reason(out, sample, cfg, clock() - started)
        if reason:
            out.stop_reason = reason
            break
    # The stop rule above judges the sampling error alone; the reported interval adds the
    # between-process reproducibility floor.
    out.estimate = stats.with_floor(_estimate(out.ref_ms, out.cand_ms, cfg), cfg.reproducibility_floor)
    out.wall_estimate = stats.with_floor(
        _estimate(out.ref_wall_ms, out.cand_wall_ms, cfg), cfg.reproducibility_floor
    )
    if not out.failures and cfg.host_ahead and cfg.launch_samples:
        # The other figure: a few pairs with the short lead only, where the GPU waits for the
        # host of a launch-bound call (what the speedup was before host_ahead); the lead stays
        # short there, however far behind the host falls.
        launch = PairedOutcome(k, lead_us=cfg.lead_us)
        for extra in range(cfg.launch_samples):
            _sample(launch, ref, cand, rtt, refresh(sample + 1 + extra, k), rng, clock)
        sample += cfg.launch_samples
        launch.estimate = out.launch_estimate = _estimate(launch.ref_ms, launch.cand_ms, cfg, resamples=200)
        launch.wall_estimate = _estimate(launch.ref_wall_ms, launch.cand_wall_ms, cfg, resamples=200)
        out.launch = launch
    if not out.failures:
        # One more pair whose output is certainly checked, after all the samples (not recorded).
        digests, _ = _sample(
            PairedOutcome(k, lead_us=out.lead_us), ref, cand, rtt, refresh(sample, k), rng, clock
        )
        _check(out, check, sample, digests)
    return out


def _sample(
    out: PairedOutcome,
    ref: Endpoint,
    cand: Endpoint,
    rtt: dict[int, float],
    n_sets: int,
    rng: random.Random,
    clock: Callable[[], float],
) -> tuple[list[Any], bool]:
    """One paired sample: both sides, in random order, K calls each from the same first set,
    the candidate stopped while the reference runs. Returns the digests of the candidate's last
    output, and whether a side's host fell behind the lead."""
    first_set = rng.randrange(max(n_sets, 1))
    order = [(ref, False), (cand, True)]
    rng.shuffle(order)
    cand_digests: list[Any] = []
    behind = False
    for side, is_cand in order:
        with nullcontext() if is_cand else _candidate_stopped(out, cand):
            worker_ms, wall, digests, timed_s = _turn(out, side, first_set, rtt[id(side)], clock)
            if not is_cand and out.ref_after_cand[-1] and rng.random() < REFERENCE_AGAIN:
                again_ms, again_wall, _, _ = _turn(out, side, first_set, rtt[id(side)], clock)
                out.ref_again_ms.append(again_ms)
                out.ref_again_wall_ms.append(again_wall)
        out.sampling_s += timed_s
        behind = behind or not side.host_ahead
        (out.cand_ms if is_cand else out.ref_ms).append(worker_ms)
        (out.cand_wall_ms if is_cand else out.ref_wall_ms).append(wall)
        if is_cand:
            cand_digests = digests
    return cand_digests, behind


@contextmanager
def _candidate_stopped(out: PairedOutcome, cand: Endpoint) -> Iterator[None]:
    """The reference's turn: the candidate stopped throughout, and whether it ran since the
    reference's previous turn recorded."""
    out.ref_after_cand.append(cand.pause())
    try:
        yield
    finally:
        cand.resume()


def _turn(
    out: PairedOutcome, side: Endpoint, first_set: int, rtt_ms: float, clock: Callable[[], float]
) -> tuple[float, float, list[Any], float]:
    """One side's turn: ``prepare`` outside the clock, then K timed calls. Returns the worker's
    and the trusted clock's time per call, the digests of the last output, and the seconds the
    trusted clock ran."""
    side.prepare()
    t0 = clock()
    side.start(out.calls_per_sample, first_set, out.lead_us)
    worker_ms = side.finish()
    t1 = clock()
    wall = (t1 - t0) * 1000 - rtt_ms
    k = out.calls_per_sample
    return worker_ms / k, max(wall, 1e-9) / k, side.digests(), t1 - t0


def _check(out: PairedOutcome, check: OutputCheck, sample: int, digests: list[Any]) -> None:
    out.checked += 1
    failure = check(sample, digests)
    if failure:
        out.failures.append(failure)


def _stop_reason(
    out: PairedOutcome, sample: int, cfg: TimingConfig, elapsed_s: float
) -> TimingStopReason | None:
    if out.failures:
        return "output_check_failed"
    if sample >= cfg.max_samples:
        return "max_samples"
    over_budget = out.sampling_s >= cfg.budget_s
    if over_budget and (sample >= cfg.budget_min_samples or elapsed_s >= 3 * cfg.budget_s):
        return "budget"
    if sample >= cfg.min_samples and sample % 10 == 0:
        # The bootstrap costs milliseconds: run it every ten samples, or the GPU idles between
        # samples, its clock drops, and the samples get noisy (seen on the H100).
        out.estimate = _estimate(out.ref_ms, out.cand_ms, cfg, resamples=min(400, cfg.bootstrap_resamples))
        if out.estimate.rel_half_width <= cfg.target_rel_ci:
            return "precision"
    return None


def _choose_calls(
    ref: Endpoint, cand: Endpoint, cfg: TimingConfig, clock: Callable[[], float]
) -> tuple[int, float]:
    """Warm both sides by count and by time, then pick K from the trusted per-call estimate.
    Also returns the slower side's per-call estimate (the host time that the lead must cover)."""
    estimates = []
    for side in (ref, cand):
        t0 = clock()
        calls, _ = side.warmup(cfg.warmup_calls, cfg.warmup_ms)
        wall_ms = (clock() - t0) * 1000 - side.round_trip_ms()
        estimates.append(max(wall_ms, 1e-6) / max(calls, 1))
    k = stats.calls_per_sample(
        min(estimates), cfg.tiny_call_ms, cfg.sample_target_ms, cfg.max_calls_per_sample
    )
    return k, max(estimates)


def _should_check(sample: int, checked: int, cfg: TimingConfig, rng: random.Random) -> bool:
    # Always the first sample, then a few at random: the candidate learns which only afterwards.
    # Few, because fetching a large output leaves the GPU idle and its clock drops.
    return sample == 0 or (checked < cfg.max_output_checks and rng.random() < cfg.check_output_fraction)


def _estimate(
    ref: list[float], cand: list[float], cfg: TimingConfig, resamples: int | None = None
) -> stats.RatioEstimate:
    return stats.bootstrap_median(stats.paired_ratios(ref, cand), resamples or cfg.bootstrap_resamples)
