"""Plain data that crosses module boundaries: tasks, candidates, evaluation results.

Standard library only, frozen, and JSON-round-trippable through ``to_dict`` / ``from_dict`` so
that results can be stored in SQLite, exported as JSONL and compared across runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, cast, get_args

# Where a task came from: the bundled suite, a KernelBench tree, a CUDA-L1 release or cudal1
# records file, or a task file of its own.
TaskOrigin = Literal["bundled", "kernelbench", "cuda-l1", "file"]
TASK_ORIGINS: tuple[TaskOrigin, ...] = get_args(TaskOrigin)

# Why paired timing stopped sampling (eval.timing.paired): the interval became as precise as
# ``target_rel_ci`` asks, the sample cap, the time budget, or a timed output failed its check.
# What limits a task's time (``SpeedOfLight.bound``): its bytes, its FLOPs, or fixed per-call costs.
Bound = Literal["memory", "compute", "launch"]
# Launch-bound rule: about 3 us per launch on an H100, and on the CUDA-L1 release 113/250 tasks
# have a floor under 3 us and 108/250 run under 0.1 ms eager (shared/research/timing-and-anchors.md
# findings 5 and 7), so a reference under 0.1 ms that takes 10x its floor is paying for launches.
LAUNCH_BOUND_MS = 0.1
LAUNCH_BOUND_FACTOR = 10.0
TimingStopReason = Literal["precision", "max_samples", "budget", "output_check_failed"]
# The clock whose figure a ``Timing``'s speedup is (issue 22: a verdict read 0.826x where the event
# samples said 1.03x, and nothing in the result said which clock had decided). "events": the
# workers' own clocks (CUDA events on a GPU, the worker's timer on a CPU) on the main samples, the
# figure by default; "wall": the trusted clock on the main samples; "launch_wall": the trusted
# clock on the short-lead pairs (the host's launch time inside). Another clock than "events"
# decides only with a ``clock_disagreement`` finding that names both figures (``checks.clock``).
TimingClock = Literal["events", "wall", "launch_wall"]
TIMING_CLOCKS: tuple[TimingClock, ...] = get_args(TimingClock)
# The weights both models were timed with (``Environment.timed_weights``): "redrawn" where the
# re-drawn-weights probe applied and the candidate passed it (the probe's own models are timed,
# so a speed that holds only at the initial weights is never measured: audit case
# gate_checked_at_runtime); "default" where it was off, skipped or had nothing to re-draw.
TimedWeights = Literal["default", "redrawn"]
# How findings and reports name each clock.
CLOCK_WORDS: dict[TimingClock, str] = {
    "events": "worker clocks (CUDA events on a GPU)",
    "wall": "trusted clock",
    "launch_wall": "trusted clock on the short-lead pairs",
}

# The phases whose seconds ``Environment.device_s`` keeps (``eval.record.EvaluationRecord.phase``).
# "first_calls" (the candidate's untimed first forward calls, where lazy builds happen) runs
# before the device is taken, beside other evaluations' work. The checks (the reference's build,
# the checked sets, the probes before and after the timing) share the device with other
# evaluations' checks (``eval.admission.DeviceAccess``); the timing (its inputs, the sampling,
# speed of light) has the device alone: ``ALONE_PHASES``.
DevicePhase = Literal[
    "first_calls",
    "reference_build",
    "check_inputs",
    "check_calls",
    "state_carried",
    "perturbation",
    "reinitialised_weights",
    "shifted_inputs",
    "timing_inputs",
    "sampling",
    "speed_of_light",
    "late_probes",
]
UNHELD_PHASES: frozenset[DevicePhase] = frozenset({"first_calls"})
ALONE_PHASES: frozenset[DevicePhase] = frozenset({"timing_inputs", "sampling", "speed_of_light"})


def source_hash(source: str) -> str:
    """Content address of a source text (sha256, hex)."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


class Stage(StrEnum):
    """Evaluation stages, in the order they run."""

    STATIC = "static"
    COMPILE = "compile"
    LOAD = "load"
    CORRECTNESS = "correctness"
    TIMING = "timing"
    INTEGRITY = "integrity"
    # The trusted side failed (out of memory, a driver error, a dead reference worker): recorded
    # so, retried by the pool, and never counted against the candidate.
    EVALUATOR = "evaluator"


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"  # recorded, audit trigger, reward unaffected
    REJECT = "reject"  # the candidate earns nothing


@dataclass(frozen=True)
class Finding:
    """A named observation about a candidate, with the evidence that supports it."""

    code: str
    severity: Severity
    stage: Stage
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity.value,
            "stage": self.stage.value,
            "message": self.message,
            "evidence": self.evidence,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        return cls(d["code"], Severity(d["severity"]), Stage(d["stage"]), d["message"], d.get("evidence", {}))


@dataclass(frozen=True)
class Task:
    """A KernelBench-format reference program: defines Model, get_inputs, get_init_inputs."""

    name: str
    source: str
    level: int = 0
    path: str | None = None
    origin: TaskOrigin = "file"

    @property
    def hash(self) -> str:
        return source_hash(self.source)


@dataclass(frozen=True)
class Candidate:
    """A source that defines ModelNew for a task; claims come from where it was found."""

    task_name: str
    source: str
    label: str = ""
    claimed_speedup: float | None = None
    # Where the source came from, as a provenance chain read left to right ("cuda-l1:h100",
    # "seed cuda-l1:h100 > cuda-graph"); "" when the file that holds it does not say.
    origin: str = ""

    @property
    def hash(self) -> str:
        return source_hash(self.source)


@dataclass(frozen=True)
class EvalRequest:
    task: Task
    source: str
    request_id: str = ""
    label: str = ""  # how progress and log lines name the candidate (its label in a run)


@dataclass(frozen=True)
class StageRecord:
    stage: Stage
    ok: bool
    seconds: float
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage.value, "ok": self.ok, "seconds": self.seconds, "message": self.message}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StageRecord:
        return cls(Stage(d["stage"]), d["ok"], d["seconds"], d.get("message", ""))


@dataclass(frozen=True)
class Correctness:
    """Outcome of comparing candidate outputs with reference outputs on fresh input sets."""

    trials: int
    passed: int
    max_abs_err: float
    max_rel_err: float  # error / (atol + rtol*|ref|): <= tolerance scale passes
    tolerance_scale: float
    against: str  # "float64" or the reference dtype when float64 was not affordable
    message: str = ""
    # The precision the candidate's errors look like (checks.precision.effective_precision): its worst
    # error against float64 as a multiple of what the task's dtype explains; "" when unmeasured.
    effective_precision: str = ""
    precision_ratio: float | None = None

    @property
    def ok(self) -> bool:
        return self.trials > 0 and self.passed == self.trials


@dataclass(frozen=True)
class Timing:
    """Paired timing of reference and candidate; raw samples kept, statistics derived.

    Times are per call in milliseconds. ``*_ms`` come from inside each worker (CUDA events on a
    GPU, with the launches queued ahead of the GPU, so the host's launch time is outside them;
    the worker's clock on CPU); ``*_wall_ms`` from the trusted evaluator's own clock.
    """

    device: str
    calls_per_sample: int
    ref_ms: tuple[float, ...]
    cand_ms: tuple[float, ...]
    ref_wall_ms: tuple[float, ...]
    cand_wall_ms: tuple[float, ...]
    speedup: float  # median of paired ratios ref/cand on ``clock`` (the worker clocks by default)
    ci_low: float  # bootstrap 95% interval of that median
    ci_high: float
    wall_speedup: float  # the same statistic from the trusted clock (the pairs its check used)
    stop_reason: TimingStopReason
    # The same statistic with the host's launch time inside (a short lead, so the GPU waits for
    # the host where calls are launch-bound), from a few extra samples; None where not measured.
    launch_speedup: float | None = None
    host_behind: int = 0  # samples whose launches the host could not queue ahead of the GPU
    clock: TimingClock = "events"  # whose figure ``speedup`` and its interval are
    # The worker clocks' figure and its interval, kept whichever clock decided (None: a result
    # stored before they were kept, whose ``speedup`` is the events' unless ``clock`` says not).
    event_speedup: float | None = None
    event_ci_low: float | None = None
    event_ci_high: float | None = None

    @property
    def events_figure(self) -> float | None:
        """The worker clocks' speedup, whichever clock decided (None: not kept, in a result stored
        before it was, where another clock decided)."""
        if self.event_speedup is not None:
            return self.event_speedup
        return self.speedup if self.clock == "events" else None

    @property
    def ref_median_ms(self) -> float:
        return _median(self.ref_ms)

    @property
    def cand_median_ms(self) -> float:
        return _median(self.cand_ms)

    @property
    def ci_half_width(self) -> float:
        """Half-width of the interval relative to the speedup (0.01 = ±1%)."""
        return (self.ci_high - self.ci_low) / 2 / self.speedup if self.speedup > 0 else float("inf")


@dataclass(frozen=True)
class SpeedOfLight:
    """How close reference and candidate come to the device's physical limits for this task.

    Floors: compulsory bytes over measured copy bandwidth, and counted FLOPs over the matmul
    peak at ``precision``; percent = max(floors) / time.
    """

    precision: str
    flops: float
    bytes_io: float
    bytes_floor_ms: float
    flops_floor_ms: float
    ref_percent: float
    cand_percent: float
    peaks: str  # which device peaks, and whether measured or nominal

    def bound(self, ref_ms: float) -> Bound | None:
        """What limits the task, from its floors and the reference's measured time per call.

        Launch-bound: the reference takes more than ``LAUNCH_BOUND_FACTOR`` times its larger floor
        and less than ``LAUNCH_BOUND_MS``, so fixed per-call costs (launches, host work), not bytes
        or FLOPs, set its time. Otherwise whichever floor is higher; a NaN FLOP floor (the work
        could not be counted) leaves the bytes floor. None when no floor is known.
        """
        floors = {"memory": self.bytes_floor_ms, "compute": self.flops_floor_ms}
        known = {k: v for k, v in floors.items() if not math.isnan(v) and v > 0}
        if not known:
            return None
        top = max(known.values())
        if ref_ms < LAUNCH_BOUND_MS and ref_ms > LAUNCH_BOUND_FACTOR * top:
            return "launch"
        return "memory" if known.get("memory", 0.0) >= known.get("compute", 0.0) else "compute"


@dataclass(frozen=True)
class PoolPlacement:
    """Where a pool ran an evaluation (``environment["pool"]`` in stored results): the local
    pool's devices, and for the Ray pool the node, actor and GPUs of the actor that ran it."""

    kind: Literal["local", "ray"]
    devices: int | None = None  # devices of the local pool
    device_counts: Mapping[str, int] | None = None  # evaluations that had reached each, then
    node: str | None = None
    actor: str | None = None
    gpu_ids: tuple[str, ...] | None = None
    attempts: int | None = None  # Ray: the first try, plus one per re-queue after a lost actor
    extra: Mapping[str, Any] = field(default_factory=dict)  # as ``Environment.extra``

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = dict(self.extra)
        d.update({f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"})
        d["device_counts"] = dict(self.device_counts) if self.device_counts is not None else None
        d["gpu_ids"] = list(self.gpu_ids) if self.gpu_ids is not None else None
        return {k: v for k, v in d.items() if v is not None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PoolPlacement:
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        args: dict[str, Any] = {k: v for k, v in d.items() if k in known and v is not None}
        if "gpu_ids" in args:
            args["gpu_ids"] = tuple(args["gpu_ids"])
        args["kind"] = cast(Literal["local", "ray"], args.get("kind", "local"))
        return cls(**args, extra={k: v for k, v in d.items() if k not in known})


@dataclass(frozen=True)
class Environment:
    """Facts about how a result was obtained, none of them part of the verdict: the reference
    worker's software and device, the evaluation's seed, where its device time went (``device_s``,
    keyed by ``DevicePhase``), what went
    wrong on the trusted side, and (``pool``) where a pool ran it.

    Built by the evaluator (``eval/record.py``); a pool that adds facts afterwards (a retry, a
    Ray actor) makes a new result with ``EvalResult.with_environment``. Stored as a flat JSON
    object whose keys are the field names; unset fields (None, False, empty) are left out, as
    they were before this record was typed."""

    # The evaluator's own code (``eval/record.evaluator_digest``): which version measured this,
    # where a run's results span sessions of changing code.
    evaluator: str | None = None
    # The reference worker's stack (``workers.ReferenceWorker.environment``).
    torch: str | None = None
    cuda: str | None = None
    python: str | None = None
    gpu: str | None = None  # the device's name (None on CPU)
    arch: str | None = None  # CUDA compute capability, "9.0"
    seed: int | None = None  # the base of the evaluation's input seeds
    device_s: Mapping[str, float] = field(default_factory=dict)  # seconds per ``DevicePhase``
    workers_paused_while_timed: int | None = None  # by the quiet window (``eval/quiet.py``)
    # When and where the paired samples ran: wall-clock ``start`` and ``end`` (epoch seconds),
    # the timed pair's ``pids`` (reference, candidate) and the device's ``gpu_uuid``, so that a
    # per-second log of the GPUs (``nvidia-smi dmon``/``pmon``, as the GPU check's lanes keep)
    # can tell which other processes used the device, and at what clock, while it was timed
    # (``benchmarks/gpu_sharing.py``).
    timed_window: Mapping[str, Any] = field(default_factory=dict)
    # The reference's samples right after the candidate ran against its clean ones (sizes,
    # medians, slowdown, p; ``eval/checks/interference.py``), whether or not it made a finding.
    reference_disturbance: Mapping[str, Any] = field(default_factory=dict)
    # The relative floor the interval was widened by, and the kernels a reference call launches
    # (estimated) that widened it (``eval/timing/paired.reproducibility_floor``).
    reproducibility: Mapping[str, Any] = field(default_factory=dict)
    float64_error: str | None = None  # why the reference's float64 twin could not run
    sol_error: str | None = None  # why no speed-of-light figure
    out_of_memory: bool = False  # the candidate's process ran out of device memory
    probes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # checks/probes.py notes
    timed_weights: TimedWeights | None = None  # None: nothing was timed
    build_cache_hit: bool | None = None
    retried_after: str | None = None  # the local pool's first try failed on the trusted side
    requeued_after: str | None = None  # the Ray actor of the first try was lost
    pool: PoolPlacement | None = None
    # Keys of stored results that none of the fields above reads (written by other versions):
    # kept, so that loading and storing a result again loses nothing.
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = dict(self.extra)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            unset = f.default if f.default is not dataclasses.MISSING else {}
            if f.name == "extra" or value is None or value == unset:
                continue
            if isinstance(value, PoolPlacement):
                value = value.to_dict()
            elif isinstance(value, Mapping):
                value = {k: dict(v) if isinstance(v, Mapping) else v for k, v in value.items()}
            d[f.name] = value
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Environment:
        d = dict(d or {})
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        args: dict[str, Any] = {k: v for k, v in d.items() if k in known and v is not None}
        if "pool" in args:
            args["pool"] = PoolPlacement.from_dict(args["pool"])
        return cls(**args, extra={k: v for k, v in d.items() if k not in known})


@dataclass(frozen=True)
class EvalResult:
    task: str
    candidate_hash: str
    device: str
    stages: tuple[StageRecord, ...] = ()
    correctness: Correctness | None = None
    timing: Timing | None = None
    findings: tuple[Finding, ...] = ()
    environment: Environment = field(default_factory=Environment)
    sol: SpeedOfLight | None = None

    @property
    def failed_stage(self) -> Stage | None:
        for rec in self.stages:
            if not rec.ok:
                return rec.stage
        return None

    @property
    def error(self) -> str:
        for rec in self.stages:
            if not rec.ok:
                return rec.message
        return ""

    @property
    def evaluator_error(self) -> bool:
        """The evaluator, not the candidate, failed: no verdict and no reward."""
        return self.failed_stage is Stage.EVALUATOR

    @property
    def rejected(self) -> bool:
        return any(f.severity is Severity.REJECT for f in self.findings)

    @property
    def correct(self) -> bool:
        return self.correctness is not None and self.correctness.ok and self.failed_stage is None

    @property
    def ok(self) -> bool:
        """Correct, timed, and no finding that rejects it."""
        return self.correct and self.timing is not None and not self.rejected

    @property
    def speedup(self) -> float | None:
        """The speedup that counts: None unless ``ok``; the trusted clock caps a disagreeing one."""
        if not self.ok or self.timing is None:
            return None
        return self.timing.speedup

    def with_environment(self, **facts: Any) -> EvalResult:
        """This result with ``facts`` added to its environment (a pool's, after the evaluation)."""
        return dataclasses.replace(self, environment=dataclasses.replace(self.environment, **facts))

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["stages"] = [s.to_dict() for s in self.stages]
        d["findings"] = [f.to_dict() for f in self.findings]
        d["environment"] = self.environment.to_dict()
        d["ok"] = self.ok
        d["speedup_effective"] = self.speedup
        d["failed_stage"] = self.failed_stage.value if self.failed_stage else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalResult:
        corr = d.get("correctness")
        tim = d.get("timing")
        findings = tuple(Finding.from_dict(f) for f in d.get("findings", []))
        if tim is not None:
            tim = dict(tim)
            for key in ("ref_ms", "cand_ms", "ref_wall_ms", "cand_wall_ms"):
                tim[key] = tuple(tim[key])
            tim.setdefault("clock", _stored_clock(tim, findings))
        return cls(
            task=d["task"],
            candidate_hash=d["candidate_hash"],
            device=d["device"],
            stages=tuple(StageRecord.from_dict(s) for s in d.get("stages", [])),
            correctness=Correctness(**corr) if corr else None,
            timing=Timing(**tim) if tim else None,
            findings=findings,
            environment=Environment.from_dict(d.get("environment")),
            sol=SpeedOfLight(**d["sol"]) if d.get("sol") else None,
        )


def _stored_clock(timing: Mapping[str, Any], findings: tuple[Finding, ...]) -> TimingClock:
    """The clock that decided a result stored before ``Timing.clock`` was: the trusted clock where
    its ``clock_disagreement`` finding's wall figure is the speedup (on the short-lead pairs where
    there were any, as ``checks.clock`` chose them), else the events."""
    walls = [f.evidence.get("wall_speedup") for f in findings if f.code == "clock_disagreement"]
    if timing.get("speedup") not in walls:
        return "events"
    return "launch_wall" if timing.get("launch_speedup") is not None else "wall"


def _median(xs: tuple[float, ...]) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
