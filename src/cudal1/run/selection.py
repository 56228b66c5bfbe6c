"""What a run's stored results say, read the same way by every stage and report: the reference
anchor's label, which candidate a task keeps (``choose_best``), whether it is worth recommending
(``beats_reference``), the bar a kernel must beat (``best_baseline``), how long a result held
the timing device and where its seconds went (``phase_seconds``), and why a result is not ok.

Pure functions over ``CandidateRow`` and ``EvalResult``: the search, the training stages and the
reports decide with these, so a run's kept kernel is the same whoever reads the run.
"""

from __future__ import annotations

import math
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, cast, get_args

from cudal1.config import Transform
from cudal1.run.rows import CandidateRow
from cudal1.schema import ALONE_PHASES, DevicePhase, EvalResult, Severity, Stage

# The task's own program evaluated as a candidate: an A-vs-A measurement whose speedup should be 1.0.
REFERENCE_LABEL = "reference"
# torch.compile in every mode the built-in transforms know, alone or over channels_last: one line
# of a user's code, so what a kernel must beat to be worth having (shared/DESIGN.md, "The bar":
# on an H100 it beat the published CUDA-L1 kernel on 11 of 17 tasks where that kernel verifies).
COMPILE_LABELS: frozenset[str] = frozenset(t for t in get_args(Transform) if t.startswith("torch-compile"))
EAGER = "eager"
# Stages that occupy the timing device; static checks and compilation are CPU work.
DEVICE_STAGES = frozenset({Stage.LOAD, Stage.CORRECTNESS, Stage.TIMING})


def device_seconds(result: EvalResult) -> float:
    """Seconds a result held the timing device (what ``max_gpu_seconds`` counts)."""
    return sum(s.seconds for s in result.stages if s.stage in DEVICE_STAGES)


def device_held_seconds(result: EvalResult) -> float:
    """Seconds a result held the timing device alone: the evaluator's timing phases
    (``schema.ALONE_PHASES``) where it recorded phases, else its device stages
    (``device_seconds``; results from before the checks shared the device held it throughout).
    Checks share the device with other evaluations' checks, so their seconds overlap and are
    not the device's."""
    phases = result.environment.device_s
    if phases:
        return float(sum(s for name, s in phases.items() if name in ALONE_PHASES))
    return device_seconds(result)


# Where an evaluation's seconds go, for a throughput figure: its build (import, load_inline,
# ModelNew) and first calls run beside other evaluations; the checks ("correctness": the sets
# and every probe) share the device with other evaluations' checks; the timing has it alone.
Part = Literal["build", "first calls", "correctness", "timing"]
PARTS: tuple[Part, ...] = get_args(Part)
PHASE_PART: dict[DevicePhase, Part] = {
    "first_calls": "first calls",
    "reference_build": "correctness",
    "check_inputs": "correctness",
    "check_calls": "correctness",
    "state_carried": "correctness",
    "perturbation": "correctness",
    "reinitialised_weights": "correctness",
    "shifted_inputs": "correctness",
    "timing_inputs": "timing",
    "sampling": "timing",
    "speed_of_light": "timing",
    "late_probes": "correctness",
}


def phase_seconds(result: EvalResult) -> dict[Part, float]:
    """A result's seconds by part: the build from its compile and load stages (less the first
    calls, which the load stage holds), the rest from ``environment.device_s``; from the
    correctness and timing stages for a result that recorded no phases."""
    phases = result.environment.device_s
    stages = {stage: sum(s.seconds for s in result.stages if s.stage is stage) for stage in Stage}
    parts = dict.fromkeys(PARTS, 0.0)
    for name, seconds in phases.items():
        parts[PHASE_PART.get(cast(DevicePhase, name), "timing")] += (
            seconds  # an unknown phase holds the device
        )
    if not phases:
        parts["correctness"], parts["timing"] = stages[Stage.CORRECTNESS], stages[Stage.TIMING]
    parts["build"] = max(0.0, stages[Stage.COMPILE] + stages[Stage.LOAD] - parts["first calls"])
    return parts


def choose_best(rows: Sequence[CandidateRow]) -> CandidateRow | None:
    """Fastest accepted candidate; the reference anchor only when no other candidate beats it."""
    ok = [r for r in rows if r.speedup is not None and r.correct]
    anchors = [r for r in ok if r.label == REFERENCE_LABEL]
    others = [r for r in ok if r.label != REFERENCE_LABEL]
    anchor = max(anchors, key=lambda r: r.speedup or 0.0, default=None)
    best = max(others, key=lambda r: (r.speedup or 0.0, -r.id), default=None)
    if best is None or (anchor is not None and (best.speedup or 0.0) <= (anchor.speedup or 0.0)):
        return anchor
    return best


def choose_kept(
    rows: Sequence[CandidateRow], failed: Container[int], finals: Mapping[int, EvalResult] | None = None
) -> CandidateRow | None:
    """The candidate a task keeps. Those that failed their final re-evaluation
    (``run.directory.failed_finals``) never are. Where candidates have passed finals
    (``run.directory.passed_finals``), the best of them at their finals' speedups
    (``choose_best``): a final is the run's word on a candidate, a search figure is not (on an
    H200 a torch.compile kernel measured 4.79x in the search and 1.73x in its final). Before any
    final, the best by the search. A candidate without a final that the next final should
    measure is ``challenger``'s."""
    finals = finals or {}
    alive = [r for r in rows if r.id not in failed]
    measured = [replace(r, speedup=finals[r.id].speedup) for r in alive if r.id in finals]
    best = choose_best(measured) if measured else choose_best(alive)
    return None if best is None else next(r for r in rows if r.id == best.id)


def challenger(
    rows: Sequence[CandidateRow], failed: Container[int], finals: Mapping[int, EvalResult], kept: CandidateRow
) -> CandidateRow | None:
    """The candidate to re-measure next beside ``kept`` (which has a final): the fastest in the
    search of those without a final that beat the reference beyond their interval and whose
    search speedup lies above the kept final's interval. A runner-up inside that interval is
    not re-measured: near ties would otherwise overtake each other in turn, each search figure
    the luckier of two (the L1_89 kernel's rival stood at 4.78x against a final of 1.73x)."""
    final = finals.get(kept.id)
    if final is None or final.timing is None:
        return None
    above = [
        r
        for r in rows
        if r.id not in failed
        and r.id not in finals
        and beats_reference(r.label, r.result)
        and (r.speedup or 0.0) > final.timing.ci_high
    ]
    return max(above, key=lambda r: (r.speedup or 0.0, -r.id), default=None)


def beats_reference(label: str, result: EvalResult | None) -> bool:
    """Whether a variant is worth recommending: not the reference itself, accepted, and faster
    than the reference beyond its interval (the lower end of its 95% CI above 1.0)."""
    return (
        label != REFERENCE_LABEL
        and result is not None
        and result.ok
        and result.timing is not None
        and result.timing.ci_low > 1.0
    )


@dataclass(frozen=True)
class Bar:
    """The speedup over eager a kernel is measured against: eager itself, or a torch.compile
    baseline of the same task measured in the same run."""

    label: str  # EAGER, or the baseline's label
    speedup: float  # the baseline's speedup over eager (1.0 for eager)
    note: str = ""  # why the bar is eager although the best baseline was asked for


def best_baseline(measured: Mapping[str, float | None]) -> Bar:
    """The faster of eager and the task's torch.compile baselines. ``measured``: the baselines
    evaluated so far, by label, with their speedup over eager (None: failed, incorrect or
    rejected); labels other than torch.compile's are ignored. With none that verified, the bar
    is eager and its note says why."""
    compiled = {label: s for label, s in measured.items() if label in COMPILE_LABELS}
    ok = {label: s for label, s in compiled.items() if s is not None and math.isfinite(s) and s > 0}
    if not ok:
        return Bar(EAGER, 1.0, "torch.compile " + ("failed" if compiled else "not measured yet"))
    label = max(sorted(ok), key=lambda name: ok[name])
    return Bar(label, ok[label]) if ok[label] > 1.0 else Bar(EAGER, 1.0)


def why_not_ok(result: EvalResult) -> str:
    """One line on why a result earns nothing: the failed stage's last message, the rejecting
    findings, or the missing verdict."""
    if result.failed_stage is not None:
        lines = result.error.strip().splitlines() or ["no message"]
        return f"{result.failed_stage} stage: {lines[-1][:200]}"
    if result.rejected:
        return "rejected: " + "; ".join(f.code for f in result.findings if f.severity is Severity.REJECT)
    return "incorrect outputs" if not result.correct else "not timed"
