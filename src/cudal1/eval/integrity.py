"""Integrity verdicts: pure functions from what was observed to named findings.

The evaluator gathers the evidence (worker observations, paired timing samples); the rules that
turn it into findings live here, so they read and test apart from process handling.
"""

from __future__ import annotations

from typing import Any

from cudal1.eval import stats
from cudal1.eval.timing import PairedOutcome
from cudal1.schema import Finding, Severity, Stage, Timing


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
    changes = obs.get("state_changes") or {}
    patched = {k: v for k, v in changes.items() if k.startswith("id:")}
    flags = {k: v for k, v in changes.items() if not k.startswith("id:")}
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
    if flags:
        found.append(
            _finding(
                "global_state_changed",
                Severity.WARNING,
                "process-wide torch settings changed (a module should scope them, e.g. with torch.backends.cudnn.flags)",
                {"changed": flags},
            )
        )
    before, after = obs.get("threads_before"), obs.get("threads_after")
    if isinstance(before, int) and isinstance(after, int) and after > before:
        found.append(
            _finding(
                "threads_left_running",
                Severity.WARNING,
                f"{after - before} thread(s) still running after the call",
                {"before": before, "after": after},
            )
        )
    return found


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
    threshold = max(disagreement * cand_ms, 4 * noise, 0.02)
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
