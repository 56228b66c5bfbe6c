"""The timing stage: paired samples of reference and candidate (``timing.paired``) on inputs both
workers make from secret seeds inside each timed request (their digests must agree), one call's
output of the checked samples fetched afterwards and compared (the call drawn after the sample),
the verdict of the trusted clock (``checks.clock``), whether work the candidate left behind slowed
the reference (``checks.interference``: its process is stopped while the reference runs, and its
leftover GPU work shows in the reference's own times), the reference's drift against its clean
baseline (``checks.drift``), and the speed-of-light percentages with the physical-limit gate.

The models timed are each worker's main model: where the re-drawn-weights probe applied and the
candidate passed it, the two models it built with re-drawn weights (``checks.probes``: a speed
that holds only at the initial weights is never measured), else the default-weight ones; the
result's ``environment.timed_weights`` says which, and the drift baseline is kept per regime.

Runs with the device and the reference's lock held, and, where the pool asks for it, inside a
quiet window (``eval/quiet.py``) that stops the pool's other workers while the pair is sampled.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from cudal1.config import EvalConfig
from cudal1.eval.checks.clock import timing_verdict
from cudal1.eval.checks.compare import Comparison
from cudal1.eval.checks.drift import reference_drift
from cudal1.eval.checks.global_state import kept_outputs
from cudal1.eval.checks.interference import reference_disturbed
from cudal1.eval.checks.stage_failure import StageFailed
from cudal1.eval.devices import device_type
from cudal1.eval.process.protocol import Command
from cudal1.eval.timing.paired import SampleInputs, measure_paired
from cudal1.eval.timing.speed_of_light import DevicePeaks, Precision, Work, physical_gate, sol_ms
from cudal1.eval.worker_pair import Seeds, WorkerPair
from cudal1.eval.workers import WorkerEndpoint, default_build_cache
from cudal1.schema import Finding, SpeedOfLight, Stage, TimedWeights


def time_pair(pair: WorkerPair, seeds: Seeds, quiet: Callable[[], AbstractContextManager[int]]) -> None:
    """Records ``Timing`` and its findings; raises ``StageFailed`` when a timed output was wrong."""
    record = pair.record
    assert pair.cand is not None and pair.ref is not None and record.correctness is not None
    cfg = pair.config.timing
    if device_type(pair.device) != "cuda":  # no GPU queue to run ahead of: one figure
        cpu_floor = cfg.reproducibility_floor_cpu
        cfg = cfg.model_copy(
            update={
                "host_ahead": False,
                "reproducibility_floor": cpu_floor,
                "reproducibility_floor_short": cpu_floor,
                "launch_gap_sd_us": 0.0,  # the CPU floor is measured whole
            }
        )
    weights: TimedWeights = "default" if pair.main_reinit is None else "redrawn"
    record.note(timed_weights=weights)
    keys = [f"time{i}" for i in range(pair.config.timing_input_sets)]
    with record.phase("timing_inputs"):
        for key in keys:  # warm-up inputs; every timed sample makes fresh ones inside its request
            pair.same_inputs(Command.MAKE_INPUTS, key, seed=seeds.next(), key=key)
    timing_args: dict[str, Any] = {
        "keys": keys,
        "flush_bytes": cfg.flush_l2_bytes,
        "lead_us": cfg.lead_us,
    }
    allow_tf32 = pair.config.guards.precision_policy != "task"
    pair.reference(Command.SET_TIMING_INPUTS, allow_tf32=allow_tf32, **timing_args)
    pair.candidate(Command.SET_TIMING_INPUTS, **timing_args)
    cand = pair.cand
    # Checked with the room its worst correctness set had against float64, and its precision
    # judged against the levels the first correctness set calibrated (a candidate that
    # computes at lower precision only while timed: audit/cases/timing_aware_half_precision.py).
    room = max(record.correctness.tolerance_scale, 1.0)
    timed_precision = pair.precision_tracker()
    levels = pair.first_levels()

    # Processes of the candidate's that left its process group run on while it is stopped for
    # the reference's turns: looked for before, at each output check and after the sampling.
    outside_group = set(cand.outside_group())

    def check(sample: int, call: int, digests: list[Any]) -> str | None:
        outside_group.update(cand.outside_group())
        fetched = cand.request_raw(Command.FETCH_OUTPUT, index=call)
        cmp, real = pair.compare(None, fetched, room, index=call)
        timed_precision.add(cmp, levels)
        return timed_output_failure(sample, call, digests, real, cmp)

    def agree(label: str, want: list[Any], got: list[Any]) -> None:
        pair.check_inputs(want, got, label)

    launches = reference_launches(pair, keys[0]) if cfg.launch_gap_sd_us > 0 else 0
    with record.phase("sampling"), quiet() as paused:
        record.note(workers_paused_while_timed=paused)
        settled: dict[str, Any] = {}
        if cfg.quiet_wait_s > 0 and device_type(pair.device) == "cuda":
            # What stopped workers queued still runs: the GPU is left to finish it (``drain``).
            settled = pair.reference(Command.QUIET, max_s=cfg.quiet_wait_s, quiet_us=cfg.quiet_round_trip_us)
        start = time.time()
        try:
            outcome = measure_paired(
                WorkerEndpoint(pair.ref.process),
                WorkerEndpoint(cand),
                cfg,
                check,
                SampleInputs(seeds.next, agree),
                rng=random.Random(seeds.next()),
                launches=launches,
            )
        finally:  # a sampling cut short by a failure was timed too
            record.note(
                timed_window={
                    "start": round(start, 3),
                    "end": round(time.time(), 3),
                    "pids": [pair.ref.process.pid, cand.pid],
                    "gpu_uuid": pair.ref.device_info.get("uuid"),
                    **({"settled": settled} if settled else {}),
                }
            )
    record.note(reproducibility={**record.environment.reproducibility, "floor": round(outcome.floor, 5),
                                 "reference_launches": launches})
    record.timing, findings = timing_verdict(outcome, pair.device, cfg.clock_disagreement)
    record.findings.extend(findings)
    if outcome.kept:
        record.findings.append(kept_outputs(outcome.kept))
    if all(f.code != "reduced_precision" for f in record.findings):
        record.findings.extend(timed_precision.findings())
    outside_group.update(cand.outside_group())
    disturbed, disturbance = reference_disturbed(outcome, sorted(outside_group))
    record.note(reference_disturbance=disturbance)
    if disturbed is not None:
        # Not compared with, nor stored as, the task's clean baseline: a disturbed reference
        # evaluated first would have made later honest ones read as drifting.
        record.findings.append(disturbed)
    elif (drift := _drift(pair, weights)) is not None:
        record.findings.append(drift)
    if outcome.failures:
        raise StageFailed(Stage.TIMING, outcome.failures[0])
    with record.phase("speed_of_light"):
        speed_of_light(pair, keys[0])


def reference_launches(pair: WorkerPair, key: str) -> int:
    """The kernels one reference call launches, estimated from its ATen operators (the reference
    worker's ``work``, kept per input signature, which the speed of light reads again); 0 where
    the reference could not be counted."""
    try:
        return int(pair.reference(Command.WORK, key=key)["work"].get("launches", 0))
    except (StageFailed, KeyError, TypeError, ValueError) as exc:
        pair.record.note(reproducibility={"launches_error": str(exc)[:300]})
        return 0


def _drift(pair: WorkerPair, weights: TimedWeights) -> Finding | None:
    """The reference's live median against its clean baseline for the weights timed (stored by
    the first call)."""
    assert pair.record.timing is not None and pair.ref is not None
    return reference_drift(
        cache_root(pair.config) / "baselines",
        pair.record.timing,
        pair.task.hash,
        str(pair.ref.device_info.get("name")),
        str(pair.ref.info.get("torch")),
        pair.config.guards.reference_drift,
        weights,
    )


def timed_output_failure(
    sample: int, call: int, reported: list[Any], fetched: list[Any], cmp: Comparison
) -> str | None:
    """Why the candidate's output of ``call`` of ``sample`` fails, or None: its fetched output's
    digests must be those its reply reported for that call (a different one was computed after
    the clock stopped, or the reply lied), and the output must match the reference's output of
    the same call."""
    if list(reported) != list(fetched):
        return (
            f"sample {sample}, call {call}: the output fetched afterwards is not the one timed "
            "(digest mismatch)"
        )
    return None if cmp.ok else f"sample {sample}, call {call}: timed output wrong: {cmp.message}"


def speed_of_light(pair: WorkerPair, key: str) -> None:
    """Speed-of-light percent for both sides, and the physical-limit gate on a GPU."""
    record = pair.record
    assert record.timing is not None and pair.ref is not None
    cache = cache_root(pair.config) / "peaks"
    try:
        w = pair.reference(Command.WORK, key=key)
        work = Work(**w["work"])
        peaks = DevicePeaks(**pair.reference(Command.PEAKS, cache_dir=str(cache))["peaks"])
    except (StageFailed, TypeError) as exc:
        record.note(sol_error=str(exc))
        return
    precision: Precision = w["precision"] if w["precision"] in peaks.flops_per_s else "float32"
    bytes_floor, flops_floor = sol_ms(work, peaks, precision)
    floor = max(bytes_floor, flops_floor)
    record.sol = SpeedOfLight(
        precision=precision,
        flops=work.flops,
        bytes_io=work.bytes_io,
        bytes_floor_ms=bytes_floor,
        flops_floor_ms=flops_floor,
        ref_percent=100 * floor / record.timing.ref_median_ms,
        cand_percent=100 * floor / record.timing.cand_median_ms,
        peaks=f"{peaks.name} ({peaks.source})",
    )
    # On a CPU, caches hold small working sets and can beat the measured DRAM bandwidth.
    if device_type(pair.device) == "cuda":
        l2 = float(pair.ref.device_info.get("l2_bytes") or peaks.l2_bytes)
        gate = physical_gate(record.timing.cand_median_ms, work, peaks, l2)
        if gate is not None:
            record.findings.append(gate)


def cache_root(config: EvalConfig) -> Path:
    """Where reference baselines and device peaks are kept: beside the build cache."""
    return (config.build_cache or default_build_cache()).parent
