"""The clock comparison: the timing verdict from paired samples, where the trusted clock (the
evaluator's own wall time) checks the workers' clocks, and ``clock_disagreement`` when the
candidate's own times are shorter than the trusted clock shows (the trusted clock's speedup then
counts where it is lower); ``timed_output_mismatch`` when a timed output was wrong or not the one
fetched. One clock decides, and the timing says which (``Timing.clock``), with both figures kept.
"""

from __future__ import annotations

from typing import Any

from cudal1.eval.timing import stats
from cudal1.eval.timing.paired import PairedOutcome
from cudal1.schema import CLOCK_WORDS, Finding, Severity, Stage, Timing, TimingClock

CLOCK_MIN_SAMPLES = 10
NET_WALL_RESAMPLES = 500


def _net_wall_estimate(probe: PairedOutcome, ref_gap: float) -> stats.RatioEstimate:
    """The trusted clock's speedup with the reference's median overhead per call taken off both
    sides' wall times: what the worker clocks should read, where both time the same calls.
    Samples the overhead covers entirely drop out (an honest candidate that fast cannot be
    told from its overhead, so it is not flagged)."""
    return stats.bootstrap_median(
        stats.paired_ratios(
            [w - ref_gap for w in probe.ref_wall_ms], [w - ref_gap for w in probe.cand_wall_ms]
        ),
        NET_WALL_RESAMPLES,
    )


def timing_verdict(out: PairedOutcome, device: str, disagreement: float) -> tuple[Timing, list[Finding]]:
    """The timing and its findings. The events decide, unless the trusted clock shows work they
    did not see: then a ``clock_disagreement`` finding, and the trusted clock's figure counts
    where it is lower. ``Timing.clock`` says which decided; both figures are kept in the timing
    and named in the finding, so a fallback never lowers a speedup without saying why."""
    findings: list[Finding] = []
    events = out.estimate
    # The clocks are compared on the short-lead pairs where there are any: behind a long lead (the
    # launches queued ahead), work left on another stream runs while the GPU spins, before either
    # clock starts (audit/cases/side_stream_unjoined.py read ~100x behind a 25 ms lead).
    short = out.launch is not None and bool(out.launch.ref_ms)
    probe = out.launch if short and out.launch is not None else out
    wall_clock: TimingClock = "launch_wall" if short else "wall"
    est = events
    clock: TimingClock = "events"
    check = _compare_clocks(probe, out.calls_per_sample, events, device, disagreement)
    if check is not None:
        # Only a lower trusted figure replaces the events': hidden work makes the candidate slower.
        if probe.wall_estimate.median < events.median:
            est, clock = probe.wall_estimate, wall_clock
        findings.append(_disagreement_finding(check, events, probe.wall_estimate, clock, wall_clock))
    assert out.stop_reason is not None  # measure_paired returns only once its stop rule says why
    timing = Timing(
        device=device,
        calls_per_sample=out.calls_per_sample,
        ref_ms=tuple(out.ref_ms),
        cand_ms=tuple(out.cand_ms),
        ref_wall_ms=tuple(out.ref_wall_ms),
        cand_wall_ms=tuple(out.cand_wall_ms),
        speedup=est.median,
        ci_low=est.ci_low,
        ci_high=est.ci_high,
        wall_speedup=probe.wall_estimate.median,
        stop_reason=out.stop_reason,
        launch_speedup=out.launch_estimate.median if out.launch_estimate else None,
        host_behind=out.host_behind,
        clock=clock,
        event_speedup=events.median,
        event_ci_low=events.ci_low,
        event_ci_high=events.ci_high,
    )
    if out.failures:
        findings.append(
            Finding(
                "timed_output_mismatch",
                Severity.REJECT,
                Stage.INTEGRITY,
                out.failures[0],
                {"checked": out.checked},
            )
        )
    return timing, findings


def _compare_clocks(
    probe: PairedOutcome, calls: int, events: stats.RatioEstimate, device: str, disagreement: float
) -> dict[str, Any] | None:
    """The evidence that the candidate's own times are shorter than the trusted clock shows, or
    None when the clocks agree."""
    ref_gap, cand_gap = probe.gap_ms()
    cand_ms = stats.median(probe.cand_ms)
    # Hidden work (unsynchronised streams, threads, forged events) shows up as extra trusted wall
    # time on the candidate's side only; both sides pay the same fixed overheads. The host side
    # of a sample is noisy at sub-millisecond scale (on the H200, A-vs-A pairs differed by up to
    # 0.2 ms per sample with no hidden work), so the excess must also clear the reference's own
    # gap noise: 4 x its median absolute deviation. Only the reference's noise counts, since a
    # candidate could make its own noisy on purpose.
    excesses = [
        (cw - ce) - (rw - re)
        for cw, ce, rw, re in zip(
            probe.cand_wall_ms, probe.cand_ms, probe.ref_wall_ms, probe.ref_ms, strict=True
        )
    ]
    # With few samples (only when calls are so slow that 3 x the budget ran out first) one noisy
    # sample must not decide: then every sample has to show the excess.
    excess = stats.median(excesses) if len(excesses) >= CLOCK_MIN_SAMPLES else min(excesses)
    ref_gaps = [w - e for w, e in zip(probe.ref_wall_ms, probe.ref_ms, strict=True)]
    noise = stats.median([abs(g - ref_gap) for g in ref_gaps])
    # The 0.02 ms floor is host jitter per sample, so per call it shrinks with K: a per-call floor
    # let a candidate forge any ratio for calls under ~25 us (audit/cases/worker_tamper_forged_time.py).
    threshold = max(disagreement * cand_ms, 4 * noise, 0.02 / max(calls, 1))
    # On a CPU both clocks time the same calls on the same core, so the worker's speedup agrees
    # with the trusted clock's once both sides' walls lose the fixed overhead per call that the
    # trusted reference shows (its gap; uncorrected, that overhead read an honest 6.3x as 4.8-5.4x
    # on the wall). A forged worker clock can stay under the per-sample excess test when the
    # trusted clock is noisy; its speedup cannot hide from this interval.
    net_wall = _net_wall_estimate(probe, ref_gap) if not device.startswith("cuda") else None
    beyond_wall = net_wall is not None and events.median > net_wall.ci_high * (1 + disagreement)
    if excess <= threshold and not beyond_wall:
        return None
    return {
        "excess_ms": excess,
        "threshold_ms": threshold,
        "ref_gap_ms": ref_gap,
        "cand_gap_ms": cand_gap,
        "cand_worker_ms": cand_ms,
        "net_wall_ci_high": net_wall.ci_high if net_wall is not None else None,
    }


def _disagreement_finding(
    evidence: dict[str, Any],
    events: stats.RatioEstimate,
    wall: stats.RatioEstimate,
    decided: TimingClock,
    wall_clock: TimingClock,
) -> Finding:
    """``clock_disagreement``, naming both figures, why they disagree and which one counts."""
    trusted = CLOCK_WORDS[wall_clock]
    if evidence["excess_ms"] > evidence["threshold_ms"]:
        why = (
            f"the candidate's trusted time exceeds its own by {evidence['excess_ms']:.4g} ms a call "
            f"more than the reference's (allowed {evidence['threshold_ms']:.4g} ms)"
        )
    else:
        why = (
            f"its own speedup is beyond the trusted clock's interval less the reference's overhead "
            f"(upper end {evidence['net_wall_ci_high']:.3f}x)"
        )
    counts = (
        f"the {trusted}'s {wall.median:.3f}x counts, not the events' {events.median:.3f}x"
        if decided != "events"
        else f"the events' {events.median:.3f}x counts (the {trusted}'s {wall.median:.3f}x is not lower)"
    )
    return Finding(
        "clock_disagreement",
        Severity.WARNING,
        Stage.INTEGRITY,
        f"the candidate's own times are shorter than the trusted clock shows: {why}; {counts}",
        {
            **evidence,
            "clock": decided,
            "trusted_clock": wall_clock,
            "event_speedup": events.median,
            "worker_speedup": events.median,  # the name results stored before ``clock`` use
            "wall_speedup": wall.median,
            "speedup": wall.median if decided != "events" else events.median,
        },
    )
