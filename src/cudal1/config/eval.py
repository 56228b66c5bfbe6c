"""Configs of the evaluator: tolerances, timing, sandbox limits, behavioural guards, the pool."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from cudal1.config.base import Device, StrictConfig


class ToleranceConfig(StrictConfig):
    """Correctness tolerances by output dtype: |cand - ref| <= atol + rtol * |ref|.

    Defaults follow KernelBench's current fp32 tolerance (1e-4) and its half-precision one (1e-2).
    When a float64 reference is affordable, the allowed error also scales with the float32
    reference's own error against float64, so a reference that is itself imprecise (TF32
    convolutions, long reductions) does not make honest candidates fail.
    """

    fp32: float = Field(1e-4, gt=0, description="atol = rtol for float32 outputs")
    fp16: float = Field(1e-2, gt=0, description="atol = rtol for float16 outputs")
    bf16: float = Field(2e-2, gt=0, description="atol = rtol for bfloat16 outputs")
    fp64: float = Field(1e-7, gt=0, description="atol = rtol for float64 outputs")
    reference_error_factor: float = Field(
        4.0, ge=1, description="allowed error may grow to this multiple of the fp32 reference's own error"
    )
    float64_reference: bool = Field(True, description="measure errors against a float64 reference run")


class TimingConfig(StrictConfig):
    """Paired, interleaved timing (shared/research/timing-and-anchors.md, section 2)."""

    @model_validator(mode="before")
    @classmethod
    def _retired_keys(cls, data: Any) -> Any:
        """``max_output_checks`` capped the timed outputs checked, which a candidate could count
        down; it is gone, and a config saved with it still loads."""
        if isinstance(data, dict) and "max_output_checks" in data:
            data = {k: v for k, v in data.items() if k != "max_output_checks"}
        return data

    warmup_calls: int = Field(3, ge=1, description="warm-up by count, per worker")
    warmup_ms: float = Field(25.0, ge=0, description="warm-up by time, per worker")
    tiny_call_ms: float = Field(
        0.5,
        gt=0,
        description="calls shorter than this are batched K per sample (one call alone is at the mercy of host jitter)",
    )
    sample_target_ms: float = Field(1.0, gt=0, description="K is chosen so that K calls take about this long")
    max_calls_per_sample: int = Field(2000, ge=1)
    min_samples: int = Field(
        30,
        ge=3,
        description="paired samples before the stop rule is consulted (fewer give overconfident intervals)",
    )
    max_samples: int = Field(1000, ge=3)
    target_rel_ci: float = Field(
        0.005, gt=0, description="stop once the 95% interval's half-width is below this fraction"
    )
    budget_s: float = Field(10.0, gt=0, description="wall-clock budget for the timing stage")
    reproducibility_floor: float = Field(
        0.0085,
        ge=0,
        description=(
            "relative 95% half-width added in quadrature to the bootstrap interval, for calls of "
            "short_call_ms and over: the scatter of A-vs-A evaluations in fresh worker processes "
            "(sd 0.32% over 45 quiet runs on the H200; inside a loaded 30-task run on an H100, "
            "2026-11-26, identical code read 0.991x at 1.96 ms, the furthest of 8 such tasks)"
        ),
    )
    short_call_ms: float = Field(
        0.1, gt=0, description="below this reference time per call, reproducibility_floor_short applies"
    )
    reproducibility_floor_short: float = Field(
        0.025,
        ge=0,
        description=(
            "the floor for calls shorter than short_call_ms, where two processes running the same "
            "code differ more: inside the same loaded H100 run, identical code of 6-92 us read "
            "0.969x-1.021x (4 of 10 tasks beyond 0.6%; 9 of 10 within 2.5%)"
        ),
    )
    launch_gap_sd_us: float = Field(
        0.07,
        ge=0,
        description=(
            "per kernel a call launches, the sd (us) of the GPU's time between kernels from one process "
            "to the next: a call of L launches and T us, timed in two fresh processes, differs by "
            "sqrt(2) x this x L / T (sd), which widens the floor in quadrature (x 1.96). Two fresh "
            "processes run the same kernels in the same time but leave 14.5-16.4 us between "
            "2_conv_block's 11 kernels a call (H200, 2026-11-28, benchmarks/placement.py); with L "
            "estimated from the reference's ATen operators this predicts the scatter of fresh pairs "
            "of identical code on the 16 bundled tasks (0.84% sd predicted, 0.73% seen on "
            "2_conv_block; 0.61% and 0.44% on 4_transformer_block; 0.03% and 0.07% on 1_gemm)"
        ),
    )
    reproducibility_floor_cpu: float = Field(
        0.04,
        ge=0,
        description=(
            "the same floor on the CPU, where two processes running the same code differ more: "
            "fresh reference/candidate pairs of the bundled CPU tasks on a 2-core EPYC VM scattered "
            "by sd 0.8-1.1% and implied floors of 1.4-4.2% (benchmarks/pair_asymmetry.py --device cpu "
            "--repeats 8)"
        ),
    )
    flush_l2_bytes: int = Field(
        256 * 2**20,
        ge=0,
        description="bytes written before each sample to flush the caches (on CPU at most twice the last-level cache)",
    )
    lead_us: float = Field(
        100.0,
        ge=0,
        description="GPU spin queued before each sample's begin event, so launch latency is off the clock",
    )
    pause_others: bool = Field(
        True,
        description="stop the pool's other candidate workers (imports, builds, __init__ GPU work) "
        "while a pair is sampled, so load cannot slow one side at random",
    )
    quiet_wait_s: float = Field(
        2.0,
        ge=0,
        description="at most this long before a pair is sampled on a GPU, wait for the work other "
        "processes queued there (a stopped worker's kernels run on) to finish (eval/process/drain.py); "
        "0: do not wait",
    )
    quiet_round_trip_us: float = Field(
        200.0,
        gt=0,
        description="the GPU counts as quiet after three one-element kernels in a row each come back "
        "within this long (tens of microseconds alone; a timeslice, about a millisecond, while "
        "another context has work)",
    )
    host_ahead: bool = Field(
        True,
        description="queue each sample's calls behind a GPU spin long enough for the host to launch "
        "them all, so the speedup is the GPU's time alone (two processes launch at speeds up to 5% "
        "apart); the launch-inclusive figure is measured beside it",
    )
    max_lead_ms: float = Field(25.0, gt=0, description="the spin ahead of a sample lasts at most this long")
    launch_samples: int = Field(
        16,
        ge=0,
        description="extra paired samples with the short lead only: the launch-inclusive speedup, and "
        "the samples the trusted clock is checked on (hidden work on another stream runs during a long lead)",
    )
    bootstrap_resamples: int = Field(2000, ge=100)
    check_output_fraction: float = Field(
        0.1,
        ge=0,
        le=1,
        description="chance that a timed sample's output is fetched and compared (the first sample's "
        "and one after the last always; no cap, so checks cannot be counted down or waited out)",
    )
    clock_disagreement: float = Field(
        0.10, gt=0, description="flag when the worker clock beats the trusted clock by more than this"
    )
    budget_min_samples: int = Field(
        10,
        ge=3,
        description="the budget stops sampling no earlier than this many samples (unless the stage "
        "has run 3 x budget_s): a verdict from 3 samples read L1_81 at half its speed",
    )
    max_timing_sets: int = Field(
        64, ge=1, description="fresh input sets per sample at most (one per timed call up to this)"
    )
    timing_sets_bytes: int = Field(
        1 << 30,
        ge=0,
        description="a sample's fresh input sets and its K kept outputs stay under this many bytes "
        "(K is capped to fit; at least one set and one call)",
    )


class SandboxConfig(StrictConfig):
    import_timeout_s: float = Field(600.0, gt=0, description="import + compile of the candidate source")
    call_timeout_s: float = Field(120.0, gt=0, description="any single request to a worker")
    first_calls_timeout_s: float = Field(
        300.0,
        gt=0,
        description=(
            "the candidate's first forward calls, where torch.compile builds and autotunes before the "
            "device is taken: max-autotune builds of level-3 tasks ran past 120 s with 7 other "
            "evaluations beside on an H100 and were failed at the load stage"
        ),
    )
    memory_limit_gb: float | None = Field(
        None,
        ge=0,
        description="a candidate worker's memory cap, GB (its heap and anonymous memory, and the "
        "shared memory it maps); past it the candidate fails with 'memory limit exceeded'. None: "
        "half of the machine's memory shared among the pool's candidate workers; 0: no cap",
    )
    cpu_time_limit_s: int | None = Field(3600, description="RLIMIT_CPU for workers")
    fixed_layout: bool = Field(
        False,
        description="start every worker with address-space randomisation off and one string-hash "
        "seed, so that two workers of the same code lay out their memory alike: identical code "
        "read up to 4.6% apart from one fresh pair of workers to the next on a launch-bound task "
        "(H200, benchmarks/pair_asymmetry.py); whether this removes it is measured there",
    )
    keep_env: tuple[str, ...] = Field(
        (
            "PATH",
            "LANG",
            "LC_ALL",
            "CUDA_HOME",
            "CUDA_PATH",
            "CUDA_VISIBLE_DEVICES",
            "LD_LIBRARY_PATH",
            "TORCH_CUDA_ARCH_LIST",
            "PYTHONPATH",
            "CC",
            "CXX",
        ),
        description="environment variables passed to workers; everything else is dropped",
    )


class GuardConfig(StrictConfig):
    """Behavioural guards run with the correctness stage (shared/research/reward-hacks.md):
    each costs at most one extra input set, and each one's finding is named in ``integrity``."""

    poison: bool = Field(
        True, description="fill free memory with NaN bytes before each checked candidate call"
    )
    perturbed_elements: int = Field(
        4, ge=0, description="a sparse-perturbation set changes 1..this many input elements (0: off)"
    )
    alternative_shapes: Literal["off", "warn", "reject"] = Field(
        "warn",
        description="one input set with the task's batch-size constant changed; a candidate that "
        "fails it is shape_specialised (warn: fixed-size tasks may be specialised legitimately)",
    )
    init_inputs: bool = Field(
        True, description="one set with the float init inputs scaled, both models rebuilt with them"
    )
    input_range: bool = Field(
        True,
        description="one correctness set with the float inputs scaled and shifted out of the task "
        "generator's range (5x + 2 std); integer-valued inputs stay",
    )
    default_weights: bool = Field(
        True,
        description="one correctness set on both models rebuilt with every floating parameter and "
        "buffer re-drawn as they are built (zero biases, unit norm weights and random weights alike); "
        "where the candidate passes it, those two models are the ones timed",
    )
    precision_policy: Literal["task", "allow_tf32", "allow_half"] = Field(
        "task",
        description="lowest effective precision accepted: the task's dtype; 10-bit mantissas "
        "(TF32, fp16); or bf16",
    )
    conv_tf32: Literal["cuda", "any_device"] = Field(
        "cuda",
        description="where an fp32 task's convolutions (and nothing else) may run at TF32 under the "
        "'task' policy, as the reference's may: cuda (PyTorch's default there, "
        "torch.backends.cudnn.allow_tf32), or any_device (CPU too, emulated: tests the rule)",
    )
    process_state: Literal["reject", "warn"] = Field(
        "reject",
        description="state left changed in the candidate's process after forward returns (torch "
        "flags, matmul precision, its threads still running): reject, as the prompt's rules say, or "
        "warn (set-and-restored inside forward is always fine)",
    )
    reference_drift: float = Field(
        0.15, gt=0, description="warn when the reference's live median is this far from its baseline"
    )
    require_custom_kernel: bool = Field(
        False,
        description="reject a ModelNew with no kernel of its own (only torch ops: "
        "static rule whole_reference_fallback), as KernelBench's custom-kernel tasks ask",
    )
    strict_static: bool = Field(
        False, description="security static rules (file, network, subprocess, ctypes...) reject, not warn"
    )


class EvalConfig(StrictConfig):
    device: Device = Field("auto", description="auto | cpu | cuda | cuda:N")
    correctness_trials: int = Field(5, ge=1, description="fresh input sets checked before timing")
    timing_input_sets: int = Field(3, ge=1, description="input sets rotated through timed calls")
    first_calls: int = Field(
        2,
        ge=0,
        description="untimed, unchecked forward calls of the candidate on inputs of its own before "
        "the device is taken, so that torch.compile builds, Triton autotuning and CUDA-graph "
        "capture do not hold the device while other candidates wait (0: off; the second call is "
        "where reduce-overhead captures its graph)",
    )
    shared_checks: bool = Field(
        True,
        description="correctness checks and probes of several evaluations share a device; only "
        "the timing has it alone (false: each evaluation holds the device through its checks too)",
    )
    tolerance: ToleranceConfig = ToleranceConfig()
    timing: TimingConfig = TimingConfig()
    sandbox: SandboxConfig = SandboxConfig()
    build_cache: Path | None = Field(
        None, description="extension build cache root (default: ~/.cache/cudal1/builds)"
    )
    seed: int | None = Field(None, description="input seed; None draws a secret one per evaluation")
    time: bool = Field(True, description="run the timing stage")
    guards: GuardConfig = GuardConfig()


class RayPoolConfig(StrictConfig):
    """The Ray pool (``eval/ray_pool.py``): one actor per GPU, each with a one-device local pool."""

    address: str | None = Field(
        None,
        description="cluster to join: ray://HOST:PORT (Ray Client), auto (a cluster started with "
        "`ray start` on this machine), or None (RAY_ADDRESS if set, else a local cluster for this run)",
    )
    actors: int | None = Field(None, ge=1, description="GPU actors (default: one per GPU of the cluster)")
    candidates_per_actor: int = Field(
        2,
        ge=1,
        description="candidates an actor holds at once: they build in parallel on its node's CPUs "
        "while it checks and times one at a time",
    )
    cpus_per_actor: float = Field(1.0, gt=0, description="CPUs Ray reserves for each actor")
    start_timeout_s: float = Field(
        300.0,
        gt=0,
        description="a replacement actor not running after this long counts as lost (its node "
        "never came back): what was meant for it is recorded as an evaluator error",
    )


class PoolConfig(StrictConfig):
    kind: Literal["local", "ray"] = Field(
        "local", description="local: this machine's devices; ray: GPU actors of a Ray cluster"
    )
    workers: int | None = Field(
        None,
        ge=1,
        description="candidates compiled and checked in parallel by a local pool (default: 2 per device)",
    )
    spares: int = Field(1, ge=0, description="warm worker processes kept ready")
    devices: tuple[Device, ...] = Field(
        (), description="devices to time on (default: the evaluator's device)"
    )
    ray: RayPoolConfig = Field(default_factory=RayPoolConfig, description="the Ray pool")
