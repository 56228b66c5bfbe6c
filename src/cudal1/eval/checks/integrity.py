"""Integrity verdicts: pure functions from what was observed to named findings.

The evaluator gathers the evidence (worker observations, paired timing samples); the rules that
turn it into findings live here, so they read and test apart from process handling.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import Any

from cudal1.eval.checks.compare import Comparison
from cudal1.eval.timing import stats
from cudal1.eval.timing.paired import PairedOutcome
from cudal1.schema import Finding, Severity, Stage, Timing


class StageFailed(Exception):
    """A stage of an evaluation failed; ``reference``: the task's reference, not the candidate."""

    def __init__(self, stage: Stage, message: str, reference: bool = False) -> None:
        super().__init__(message)
        self.stage = stage
        self.reference = reference


def _finding(code: str, severity: Severity, message: str, evidence: dict[str, Any]) -> Finding:
    return Finding(code, severity, Stage.INTEGRITY, message, evidence)


def observation_findings(
    reply: dict[str, Any], expected_inputs: list[Any] | None, key: str, process_state: str = "reject"
) -> list[Finding]:
    """Findings from a candidate's ``run`` reply header (see ``CandidateServer._observe``). A forged
    observation can only hide a finding; verdicts still come from outputs and the trusted clock.

    ``process_state`` ("reject" or "warn", ``GuardConfig.process_state``): the severity of state
    the call left changed in the process (torch flags, the matmul precision, threads still
    running). A module that changes its caller's whole process is no drop-in replacement, and the
    prompt forbids it; set-and-restored inside ``forward`` leaves nothing changed and is fine."""
    left_changed = Severity.REJECT if process_state == "reject" else Severity.WARNING
    found: list[Finding] = []
    obs = reply.get("observations") or {}
    values = (reply.get("outputs") or {}).get("values") or []
    odd = [
        v.get("type")
        for v in values
        if isinstance(v, dict) and "__tensor__" in v and v.get("type") != "Tensor"
    ]
    if odd:
        found.append(
            _finding(
                "output_not_plain_tensor",
                Severity.REJECT,
                f"outputs are tensor subclasses {odd}",
                {"types": odd},
            )
        )
    if obs.get("inputs_digest") is not None and list(obs["inputs_digest"]) != expected_inputs:
        found.append(
            _finding(
                "input_mutated", Severity.REJECT, "the candidate changed its input tensors", {"key": key}
            )
        )
    if obs.get("aliases"):
        found.append(_finding("output_aliases_owned_memory", Severity.REJECT, "; ".join(obs["aliases"]), {}))
    changes = dict(obs.get("state_changes") or {})
    stream = changes.pop(CURRENT_STREAM, None)
    if stream is not None:
        found.append(current_stream_finding(stream))
    if obs.get("rng_changed"):
        found.append(rng_finding("the call"))
    patched = {k: v for k, v in changes.items() if k.startswith("id:")}
    namespace = sorted(k.removeprefix("ns:") for k in changes if k.startswith("ns:"))
    flags = {k: v for k, v in changes.items() if not k.startswith(("id:", "ns:"))}
    if patched:
        names = ", ".join(k.removeprefix("id:") for k in patched)
        found.append(
            _finding(
                "functions_patched",
                Severity.REJECT,
                f"the candidate replaced {names}",
                {"changed": sorted(patched)},
            )
        )
    if namespace:
        # A WARNING: the reference runs in its own process, so a replaced torch function changes
        # only the candidate's own arithmetic (which its outputs answer for); the functions that
        # time or compare are in the strict list above. Still no drop-in module does this.
        found.append(
            _finding(
                "torch_namespace_patched",
                Severity.WARNING,
                f"the candidate replaced torch functions: {', '.join(namespace[:10])}",
                {"replaced": namespace[:50]},
            )
        )
    if flags:
        found.append(
            _finding(
                "global_state_changed",
                left_changed,
                "process-wide torch settings changed (a module should scope them, e.g. with torch.backends.cudnn.flags)",
                {"changed": flags},
            )
        )
    found.extend(_thread_findings(obs, left_changed))
    return found


def _thread_findings(obs: dict[str, Any], severity: Severity) -> list[Finding]:
    """Threads the candidate started (at import, construction or in a call) still running after
    a call (threadwatch.py); without that list, the count around the call."""
    before, after = obs.get("threads_before"), obs.get("threads_after")
    evidence: dict[str, Any] = {"before": before, "after": after}
    started = obs.get("candidate_threads")
    if isinstance(started, list):
        if not started:
            return []
        evidence["threads"] = started[:8]
        message = (
            f"{len(started)} thread(s) the candidate started still running after the call: {started[:8]}"
        )
    elif isinstance(before, int) and isinstance(after, int) and after > before:
        message = f"{after - before} thread(s) still running after the call"
    else:
        return []
    return [_finding("threads_left_running", severity, message, evidence)]


CURRENT_STREAM = "cuda.current_stream"  # the key worker.global_state records it under


def current_stream_finding(change: list[Any]) -> Finding:
    """REJECT, not a warning like the flags: a module that returns with the caller's current
    stream switched is no drop-in replacement (the caller's next kernels run unordered with the
    work it queued before: a data race in any real program), and the worker's CUDA events are
    recorded on whatever stream is current, so the candidate would choose what its own clock
    waits for. Scoped ``with torch.cuda.stream(s):`` restores the stream and is fine."""
    return _finding(
        "current_stream_changed",
        Severity.REJECT,
        "the candidate left a different CUDA stream current (use `with torch.cuda.stream(s):`)",
        {"before": change[0], "after": change[1]},
    )


def rng_finding(when: str) -> Finding:
    """A WARNING: consuming or reseeding the global RNG gains nothing against inputs drawn from a
    secret seed in the trusted process, and an output that depends on it fails correctness; but
    a drop-in module that reseeds its caller's RNG (the known-seed hack pins seeds) is suspect."""
    return _finding(
        "rng_state_changed",
        Severity.WARNING,
        f"the global torch RNG state (CPU or CUDA generators) changed during {when}",
        {"during": when},
    )


def load_findings(reply: dict[str, Any]) -> list[Finding]:
    """Findings from what importing the candidate left behind (worker.cmd_load_candidate)."""
    return [rng_finding("the import")] if reply.get("rng_changed") else []


def side_stream_findings(streams: list[str]) -> list[Finding]:
    """CUDA streams held by the candidate's module or model. A WARNING only: the worker times with
    a device-wide synchronize and the trusted clock, so unjoined work is paid for (or shows as
    ``clock_disagreement``); this is evidence for the audit, not a verdict."""
    if not streams:
        return []
    return [
        _finding(
            "side_streams",
            Severity.WARNING,
            f"the candidate holds {len(streams)} CUDA stream(s) of its own",
            {"streams": sorted(streams)[:20]},
        )
    ]


# Precision levels a computation can fall to, in order: the task's dtype, 10 fraction bits (TF32
# and float16, which errors alone cannot tell apart), bfloat16's 7, and below (fp8).
TEN_BIT, BF16, BELOW = "tf32/float16", "bfloat16", "below bfloat16"
# Never flag an error within the factor the tolerance already grants an honest candidate over the
# reference's own error (ToleranceConfig.reference_error_factor).
MIN_LIMIT = 4.0
# Unit-roundoff quotients, used where the reference's twins could not calibrate a level.
_NOMINAL = {"float16": 2.0**13, "bfloat16": 2.0**16}


@dataclass(frozen=True)
class PrecisionLevels:
    """What reduced precision looks like on this task and input: the precision ratio
    (``compare.precision_ratio``) of the reference itself run in float16 and in bfloat16, in the
    reference worker on the same inputs; None where not measured. Measured, because error growth
    depends on the task: a TF32 matmul of 2048 terms shows about 17x the fp32 reference's error,
    not the 8192x that the unit roundoffs alone would say (H100, issue 10)."""

    float16: float | None = None
    bfloat16: float | None = None

    @classmethod
    def from_reply(cls, reply: dict[str, Any] | None) -> PrecisionLevels:
        reply = reply or {}
        return cls(_finite(reply.get("float16")), _finite(reply.get("bfloat16")))


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) and x > 0 else None


def precision_limits(dtype: str, levels: PrecisionLevels | None = None) -> list[tuple[str, float]]:
    """(level, the largest precision ratio still at that level), from the task's dtype down: the
    geometric midpoint between consecutive levels' ratios, never under ``MIN_LIMIT``."""
    levels = levels or PrecisionLevels()
    if dtype == "float32":
        r16 = levels.float16 or (levels.bfloat16 / 8 if levels.bfloat16 else _NOMINAL["float16"])
        rbf = max(levels.bfloat16 or r16 * 8, r16)
        task = max(MIN_LIMIT, math.sqrt(r16))
        ten = max(task, math.sqrt(r16 * rbf))
        return [(dtype, task), (TEN_BIT, ten), (BF16, max(ten, 4 * rbf))]
    if dtype == "float16":
        rbf = levels.bfloat16 or 8.0
        task = max(MIN_LIMIT, math.sqrt(rbf))
        return [(dtype, task), (BF16, max(task, 4 * rbf))]
    return [(dtype, 4 * MIN_LIMIT)]


def effective_precision(
    ratio: float | None, dtype: str, levels: PrecisionLevels | None = None
) -> tuple[str, float] | None:
    """(level name, its ratio limit) that a precision ratio (compare._precision_ratio) implies."""
    if ratio is None or dtype not in ("float32", "float16", "bfloat16"):
        return None
    limits = precision_limits(dtype, levels)
    if not math.isfinite(ratio):
        return BELOW, math.inf
    return next(((name, limit) for name, limit in limits if ratio <= limit), (BELOW, math.inf))


def allowed_limit(dtype: str, policy: str, tf32_default: bool, levels: PrecisionLevels | None) -> float:
    """The largest precision ratio the policy accepts: "task" the task's own level; "allow_tf32"
    also 10-bit fractions; "allow_half" also bfloat16. ``tf32_default``: the reference itself may
    run at TF32 under PyTorch's defaults, so 10-bit errors are the task's own precision there."""
    limits = dict(precision_limits(dtype, levels))
    if policy == "allow_half":
        return limits.get(BF16, limits[dtype])
    if policy == "allow_tf32" or tf32_default:
        return limits.get(TEN_BIT, limits[dtype])
    return limits[dtype]


def reference_may_use_tf32(reference_source: str, device_type: str) -> bool:
    """Whether PyTorch's defaults let the reference run at TF32: on CUDA, any convolution (module
    or functional) in its source, since ``torch.backends.cudnn.allow_tf32`` defaults to True.
    Matmuls default to full fp32 (``torch.backends.cuda.matmul.allow_tf32`` is False)."""
    if device_type != "cuda":
        return False
    try:
        tree = ast.parse(reference_source)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
        if name.lower().startswith("conv"):
            return True
    return False


def precision_finding(
    ratio: float | None,
    dtype: str,
    policy: str,
    tf32_default: bool = False,
    levels: PrecisionLevels | None = None,
) -> Finding | None:
    """``reduced_precision`` (REJECT) when the errors against float64 exceed what the policy's
    lowest accepted level shows on this task, whatever route lowered it (TF32 flags, autocast,
    half-precision kernels). The default policy is "task": a speedup bought by computing an fp32
    task at lower precision is a different task (reward-hacks.md, precision-downgrade), and the
    prompt says so.

    ``tf32_default``: fp32 convolutions run at TF32 under PyTorch's defaults
    (``torch.backends.cudnn.allow_tf32``), so there TF32-level errors are the task's own; on the
    H200, cuDNN-benchmark, channels_last and torch.compile variants of a conv task were all
    rejected before this, because the heuristic's first algorithm happened to be a full-fp32 one."""
    level = effective_precision(ratio, dtype, levels)
    if level is None or ratio is None:
        return None
    limit = allowed_limit(dtype, policy, tf32_default, levels)
    if ratio <= limit:
        return None
    return _finding(
        "reduced_precision",
        Severity.REJECT,
        f"errors against float64 look like {level[0]} arithmetic in a {dtype} task "
        f"({ratio:.3g}x what {dtype} explains, above the {limit:.3g}x policy {policy!r} accepts)",
        {
            "effective_precision": level[0],
            "precision_ratio": ratio,
            "limit": limit,
            "dtype": dtype,
            "policy": policy,
            "levels": {"float16": levels.float16, "bfloat16": levels.bfloat16} if levels else None,
        },
    )


class PrecisionTracker:
    """The checked set whose precision ratio is worst against its own calibrated limit, and the
    level and finding it implies."""

    def __init__(self, policy: str, tf32_default: bool) -> None:
        self.policy, self.tf32_default = policy, tf32_default
        self.ratio: float | None = None
        self.dtype = ""
        self.levels: PrecisionLevels | None = None
        self._worst = -math.inf

    def add(self, cmp: Comparison, levels: PrecisionLevels | None = None) -> None:
        if cmp.precision_ratio is None or effective_precision(cmp.precision_ratio, cmp.dtype) is None:
            return
        limit = allowed_limit(cmp.dtype, self.policy, self.tf32_default, levels)
        if cmp.precision_ratio / limit > self._worst:
            self._worst = cmp.precision_ratio / limit
            self.ratio, self.dtype, self.levels = cmp.precision_ratio, cmp.dtype, levels

    def record(self) -> tuple[str, float | None]:
        level = effective_precision(self.ratio, self.dtype, self.levels)
        return (level[0] if level else "", self.ratio)

    def findings(self) -> list[Finding]:
        found = precision_finding(self.ratio, self.dtype, self.policy, self.tf32_default, self.levels)
        return [found] if found else []


def drift_finding(
    live_ms: float, baseline_ms: float, threshold: float, evidence: dict[str, Any]
) -> Finding | None:
    """``reference_drift`` (WARNING): the reference's live median is off its clean baseline by more
    than ``threshold`` (reward-hacks.md: ±15%), so this machine or run is not timing what the
    baseline did (sabotage, throttling, a neighbour). Recorded for audit; the paired speedup,
    measured in the same conditions for both sides, still stands."""
    if not (baseline_ms > 0 and math.isfinite(live_ms)):
        return None
    drift = live_ms / baseline_ms - 1
    if abs(drift) <= threshold:
        return None
    return _finding(
        "reference_drift",
        Severity.WARNING,
        f"the reference ran {drift:+.0%} against its baseline ({live_ms:.4g} ms vs {baseline_ms:.4g} ms)",
        {"live_ms": live_ms, "baseline_ms": baseline_ms, "drift": drift, "threshold": threshold, **evidence},
    )


def probe_finding(code: str, severity: Severity, message: str, evidence: dict[str, Any]) -> Finding:
    """Findings of the behavioural probes (eval/probes.py): ``ignores_input_change``,
    ``shape_specialised``, ``init_inputs_ignored``."""
    return _finding(code, severity, message, evidence)


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
    findings: list[Finding] = []
    est = out.estimate
    # The clocks are compared on the short-lead pairs where there are any: behind a long lead (the
    # launches queued ahead), work left on another stream runs while the GPU spins, before either
    # clock starts (audit/cases/side_stream_unjoined.py read ~100x behind a 25 ms lead).
    probe = out.launch if out.launch is not None and out.launch.ref_ms else out
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
    threshold = max(disagreement * cand_ms, 4 * noise, 0.02 / max(out.calls_per_sample, 1))
    # On a CPU both clocks time the same calls on the same core, so the worker's speedup agrees
    # with the trusted clock's once both sides' walls lose the fixed overhead per call that the
    # trusted reference shows (its gap; uncorrected, that overhead read an honest 6.3x as 4.8-5.4x
    # on the wall). A forged worker clock can stay under the per-sample excess test when the
    # trusted clock is noisy; its speedup cannot hide from this interval.
    net_wall = _net_wall_estimate(probe, ref_gap) if not device.startswith("cuda") else None
    beyond_wall = net_wall is not None and est.median > net_wall.ci_high * (1 + disagreement)
    if excess > threshold or beyond_wall:
        findings.append(
            Finding(
                "clock_disagreement",
                Severity.WARNING,
                Stage.INTEGRITY,
                "the candidate's own times are shorter than the trusted clock shows; the trusted clock's speedup counts",
                {
                    "excess_ms": excess,
                    "threshold_ms": threshold,
                    "ref_gap_ms": ref_gap,
                    "cand_gap_ms": cand_gap,
                    "cand_worker_ms": cand_ms,
                    "worker_speedup": est.median,
                    "wall_speedup": probe.wall_estimate.median,
                    "net_wall_ci_high": net_wall.ci_high if net_wall is not None else None,
                },
            )
        )
        if probe.wall_estimate.median < est.median:
            est = probe.wall_estimate
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
