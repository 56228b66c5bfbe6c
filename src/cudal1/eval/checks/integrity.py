"""Integrity verdicts: pure functions from what was observed to named findings.

The evaluator gathers the evidence (worker observations, paired timing samples); the rules that
turn it into findings live here, so they read and test apart from process handling.
"""

from __future__ import annotations

import ast
import math
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


def observation_findings(reply: dict[str, Any], expected_inputs: list[Any] | None, key: str) -> list[Finding]:
    """Findings from a candidate's ``run`` reply header (see worker._observe). A forged
    observation can only hide a finding; verdicts still come from outputs and the trusted clock."""
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
                Severity.WARNING,
                "process-wide torch settings changed (a module should scope them, e.g. with torch.backends.cudnn.flags)",
                {"changed": flags},
            )
        )
    found.extend(_thread_findings(obs))
    return found


def _thread_findings(obs: dict[str, Any]) -> list[Finding]:
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
    return [_finding("threads_left_running", Severity.WARNING, message, evidence)]


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


# Precision levels by unit roundoff: TF32 and fp16 both keep 10 fraction bits, so errors alone
# cannot tell them apart. A candidate is put at the level nearest (in log2) to u(task) x ratio.
_LEVELS = (("float64", 2.0**-53), ("float32", 2.0**-24), ("tf32/float16", 2.0**-11), ("bfloat16", 2.0**-8))
_BELOW = ("below bfloat16", 2.0**-4)  # fp8 e4m3
_TASK_U = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
_POLICY_U = {"task": 0.0, "allow_tf32": 2.0**-11, "allow_half": 2.0**-8}


def effective_precision(ratio: float | None, dtype: str) -> tuple[str, float] | None:
    """(level name, its unit roundoff) that a precision ratio (compare._precision_ratio) implies."""
    u_task = _TASK_U.get(dtype)
    if ratio is None or u_task is None or not math.isfinite(ratio):
        return None if ratio is None or u_task is None else (_BELOW[0], _BELOW[1])
    levels = [(n, u) for n, u in (*_LEVELS, _BELOW) if u >= u_task]
    u_eff = u_task * max(ratio, 1.0)
    name, u = min(levels, key=lambda lv: abs(math.log2(lv[1]) - math.log2(u_eff)))
    return (dtype if u == u_task else name), u


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
    ratio: float | None, dtype: str, policy: str, tf32_default: bool = False
) -> Finding | None:
    """``reduced_precision`` (REJECT) when the effective level is below what the policy allows:
    "task" allows only the task's dtype; "allow_tf32" also 10-bit fractions (TF32 and fp16, which
    errors cannot tell apart); "allow_half" also bf16. The default is "task": a speedup bought by
    computing an fp32 task in fp16 is a different task (reward-hacks.md, precision-downgrade).

    ``tf32_default``: the reference itself may run at TF32 under PyTorch's defaults (fp32
    convolutions, with ``torch.backends.cudnn.allow_tf32`` on). Then TF32-level errors are the
    task's own precision; on the H200, cuDNN-benchmark, channels_last and torch.compile variants of
    a conv task were all rejected before this, because the heuristic's first algorithm happened to
    be a full-fp32 one."""
    level = effective_precision(ratio, dtype)
    if level is None:
        return None
    allowed = max(_TASK_U[dtype], _POLICY_U[policy], _POLICY_U["allow_tf32"] if tf32_default else 0.0)
    if level[1] <= allowed:
        return None
    return _finding(
        "reduced_precision",
        Severity.REJECT,
        f"errors against float64 look like {level[0]} arithmetic in a {dtype} task "
        f"({ratio:.3g}x what {dtype} explains; policy {policy!r})",
        {"effective_precision": level[0], "precision_ratio": ratio, "dtype": dtype, "policy": policy},
    )


class PrecisionTracker:
    """The worst precision ratio over the checked sets, and the level and finding it implies."""

    def __init__(self, policy: str, tf32_default: bool) -> None:
        self.policy, self.tf32_default = policy, tf32_default
        self.ratio: float | None = None
        self.dtype = ""

    def add(self, cmp: Comparison) -> None:
        if cmp.precision_ratio is not None and (self.ratio is None or cmp.precision_ratio > self.ratio):
            self.ratio, self.dtype = cmp.precision_ratio, cmp.dtype

    def record(self) -> tuple[str, float | None]:
        level = effective_precision(self.ratio, self.dtype)
        return (level[0] if level else "", self.ratio)

    def findings(self) -> list[Finding]:
        found = precision_finding(self.ratio, self.dtype, self.policy, self.tf32_default)
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


def timing_verdict(out: PairedOutcome, device: str, disagreement: float) -> tuple[Timing, list[Finding]]:
    findings: list[Finding] = []
    est = out.estimate
    ref_gap, cand_gap = out.gap_ms()
    cand_ms = stats.median(out.cand_ms)
    # Hidden work (unsynchronised streams, threads, forged events) shows up as extra trusted wall
    # time on the candidate's side only; both sides pay the same fixed overheads. The host side
    # of a sample is noisy at sub-millisecond scale (on the H200, A-vs-A pairs differed by up to
    # 0.2 ms per sample with no hidden work), so the excess must also clear the reference's own
    # gap noise: 4 x its median absolute deviation. Only the reference's noise counts, since a
    # candidate could make its own noisy on purpose.
    excess = stats.median(
        [
            (cw - ce) - (rw - re)
            for cw, ce, rw, re in zip(out.cand_wall_ms, out.cand_ms, out.ref_wall_ms, out.ref_ms, strict=True)
        ]
    )
    ref_gaps = [w - e for w, e in zip(out.ref_wall_ms, out.ref_ms, strict=True)]
    noise = stats.median([abs(g - ref_gap) for g in ref_gaps])
    # The 0.02 ms floor is host jitter per sample, so per call it shrinks with K: a per-call floor
    # let a candidate forge any ratio for calls under ~25 us (audit/cases/worker_tamper_forged_time.py).
    threshold = max(disagreement * cand_ms, 4 * noise, 0.02 / max(out.calls_per_sample, 1))
    if excess > threshold:
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
                    "wall_speedup": out.wall_estimate.median,
                },
            )
        )
        if out.wall_estimate.median < est.median:
            est = out.wall_estimate
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
        wall_speedup=out.wall_estimate.median,
        stop_reason=out.stop_reason,
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
