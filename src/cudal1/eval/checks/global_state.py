"""Findings from what the candidate's worker observed around its calls and its import: process-wide
state left changed (torch flags, patched functions, the current CUDA stream, the global RNG,
threads still running, CUDA streams held), and in the same reply, inputs mutated and outputs
that alias owned memory or are not plain tensors.

Pure functions from a worker's reply to named findings: the evaluator gathers the evidence,
the rules live here. A forged observation can only hide a finding; verdicts still come from the
outputs and the trusted clock.
"""

from __future__ import annotations

from typing import Any

from cudal1.schema import Finding, Severity, Stage

# A candidate rejected for this alone gets a repaired twin in the search (search/repair.py).
GLOBAL_STATE_CHANGED = "global_state_changed"


def _finding(code: str, severity: Severity, message: str, evidence: dict[str, Any]) -> Finding:
    return Finding(code, severity, Stage.INTEGRITY, message, evidence)


def kept_outputs(messages: list[str]) -> Finding:
    """``output_aliases_owned_memory`` from the timed calls: outputs in the memory of other
    outputs still alive (``state.EarlierOutputs``), which a module that computes only while it
    is checked, and returns what it kept while it is timed, shows there alone."""
    return _finding(
        "output_aliases_owned_memory", Severity.REJECT, "timed calls: " + "; ".join(messages), {"kept": messages}
    )


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
                GLOBAL_STATE_CHANGED,
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
