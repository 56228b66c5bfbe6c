"""The learning check's statistics: intervals on mean verified speedup, the paired test, the pass rule.

A sample's value is its program's verified speedup over eager in the fresh re-measurement, or 0
when it does not verify (a parse failure, a failed stage, a rejection: a program that does not
verify delivers nothing). A policy's score is the mean over tasks of its per-task mean, so every
task weighs the same however many samples it has.

The paired test is a stratified bootstrap of the difference final - SFT: tasks are the strata
(fixed: the claim is about these tasks, not a population they were drawn from), and within each
task the final policy's and the SFT policy's samples are resampled. Pairing by task removes the
spread between tasks (1.2x on one, 2x on another), which an unpaired interval would carry; a
Wilcoxon signed-rank test over tasks has too few units (its smallest two-sided p is 0.25 with 3
tasks and 0.125 with 4, so it can never pass at 5%), and pairing samples by index across two
policies pairs nothing real. What the bootstrap leaves out: the measurement noise of each program (one fresh
measurement each; its own interval is in the run's database).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

Samples = Mapping[str, Sequence[float]]  # task -> per-sample values
LEVEL = 0.95
RESAMPLES = 4000
BAR = 1.3  # the final policy's fresh mean verified speedup must reach it (issue 23, item 1)
FLAT_TOLERANCE = 0.05  # within 5% of its SFT policy a control is flat, and a rise is no gain


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def text(self, unit: str = "x") -> str:
        return f"{self.mean:.3f}{unit} [{self.low:.3f}, {self.high:.3f}]"


def score(samples: Samples) -> float:
    """Mean over tasks of each task's mean value."""
    return statistics.fmean(statistics.fmean(v) for v in samples.values() if v)


def _resampled(samples: Samples, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` bootstrap scores: each task's samples resampled within the task."""
    per_task = []
    for values in samples.values():
        if not values:
            continue
        arr = np.asarray(values, dtype=float)
        idx = rng.integers(0, len(arr), size=(n, len(arr)))
        per_task.append(arr[idx].mean(axis=1))
    return np.mean(per_task, axis=0)


def _interval(mean: float, draws: np.ndarray) -> Interval:
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return Interval(mean, float(low), float(high))


def mean_interval(samples: Samples, seed: int = 0, n: int = RESAMPLES) -> Interval:
    """A policy's score with its stratified bootstrap interval."""
    return _interval(score(samples), _resampled(samples, np.random.default_rng(seed), n))


def paired_difference(final: Samples, sft: Samples, seed: int = 0, n: int = RESAMPLES) -> Interval:
    """Score(final) - score(sft) over the tasks both have, with its stratified bootstrap interval."""
    tasks = [t for t in final if final[t] and sft.get(t)]
    a = {t: final[t] for t in tasks}
    b = {t: sft[t] for t in tasks}
    rng = np.random.default_rng(seed)
    draws = _resampled(a, rng, n) - _resampled(b, rng, n)
    return _interval(score(a) - score(b), draws)


def is_flat(difference: Interval, sft_score: float, tolerance: float = FLAT_TOLERANCE) -> bool:
    """No difference from the SFT policy's score is shown (the interval holds 0), or it is within
    ``tolerance`` of that score."""
    return difference.contains(0.0) or abs(difference.mean) <= tolerance * sft_score


def gained(difference: Interval, sft_score: float, tolerance: float = FLAT_TOLERANCE) -> bool:
    """A gain over the SFT policy is shown: above 0 beyond the interval, by more than
    ``tolerance`` of its score. What the control must not show: with shuffled rewards GRPO has
    no signal, so a gain would be GRPO's mechanics (a collapse onto a frequent arm), not
    learning. A control that falls (seed 0's on four H200s drifted into replies with no program,
    2026-11-28) shows no gain either; ``trend`` names it."""
    return difference.low > 0 and difference.mean > tolerance * sft_score


def trend(difference: Interval, sft_score: float) -> str:
    if is_flat(difference, sft_score):
        return "flat"
    return "rose" if difference.mean > 0 else "fell"


@dataclass(frozen=True)
class SeedVerdict:
    seed: int
    sft: Interval
    final: Interval
    control: Interval | None
    ablation: Interval | None
    final_vs_sft: Interval
    control_vs_sft: Interval | None
    ablation_vs_sft: Interval | None
    # Not in the pass rule: what the final policy gained beyond what GRPO's mechanics gave the
    # control (a control that learns to write programs that verify, or sharpens onto a frequent
    # arm, can rise with no speed signal: seed 1's on four H200s, 2026-11-28).
    final_vs_control: Interval | None
    reaches_bar: bool
    above_sft: bool
    control_gained: bool | None  # None: no control run, which does not pass

    @property
    def passed(self) -> bool:
        return self.reaches_bar and self.above_sft and self.control_gained is False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"passed": self.passed}


def judge_seed(seed: int, policies: Mapping[str, Samples], bar: float = BAR) -> SeedVerdict:
    """The pass rule for one seed: the final policy's score at least ``bar``, above the SFT
    policy's beyond the paired interval, and no gain shown by the control (``gained``). ``policies``: sft, final,
    control, ablation (the last two may be missing; a missing control does not pass)."""
    sft, final = policies["sft"], policies["final"]
    control, ablation = policies.get("control"), policies.get("ablation")
    sft_i, final_i = mean_interval(sft, seed), mean_interval(final, seed)
    diff = paired_difference(final, sft, seed)
    control_diff = paired_difference(control, sft, seed) if control else None
    ablation_diff = paired_difference(ablation, sft, seed) if ablation else None
    return SeedVerdict(
        seed=seed,
        sft=sft_i,
        final=final_i,
        control=mean_interval(control, seed) if control else None,
        ablation=mean_interval(ablation, seed) if ablation else None,
        final_vs_sft=diff,
        control_vs_sft=control_diff,
        ablation_vs_sft=ablation_diff,
        final_vs_control=paired_difference(final, control, seed) if control else None,
        reaches_bar=final_i.mean >= bar,
        above_sft=diff.low > 0,
        control_gained=None if control_diff is None else gained(control_diff, sft_i.mean),
    )
