"""The paper's report over runs and verify reports: what ``cudal1 report`` prints and plots.

Pure: callers read the files (``search.optimize.load_run``, ``search.verify.load_verify_report``)
and hand the records to ``run_source`` / ``verify_source``; this module turns them into one
``Entry`` per task, the statistics, and ``TableSpec``s.

The numbers, as the CUDA-L1 paper reports them (arXiv 2507.14111; shared/research/cuda-l1-method.md):
- per task, the *kept* kernel's speedup over the eager reference: for a run, the final
  re-evaluation of the variant it kept, and exactly 1.0 where it kept the reference (no variant
  beat it beyond its interval); for a verify report, the measured speedup of each verified record;
- mean, max, p75, p50, p25 and geometric mean over the correct tasks; success = correct tasks;
  faster = tasks above 1.01x; per level and over all;
- against each baseline the run measured on the same device (torch.compile modes, CUDA graph,
  cuDNN flags): kept speedup / that baseline's speedup, so "over torch.compile" reads as in the
  CUDA-L1 release tables; and "over best baseline": over the faster of eager and the task's
  torch.compile baselines (``run.selection.best_baseline``, the bar GRPO's reward uses by
  default), where a torch.compile baseline verified. On a CPU the CUDA-only ones (CUDA graph, cuDNN flags, pairs holding
  them) ran the reference unchanged: a run from before they were skipped there may hold them,
  and they are never reported as what their names say;
- speed of light: the kept kernel's time against the device's physical floor (percent);
- cost: LLM calls, tokens and dollars from the run's ledger; seconds the timing device (a GPU, or
  the CPU) was held alone, for timing (checks share it with other evaluations' checks);
- throughput: a run's evaluations per device-hour, the share of wall time its devices were held
  alone,
  and its seconds by part (build, first calls, correctness, timing; ``run.throughput``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cudal1.report.runs import FASTER, fmt_x
from cudal1.report.tables import Cell, Col, TableSpec
from cudal1.run.records import RunRecord, TaskRecord
from cudal1.run.selection import COMPILE_LABELS, PARTS, REFERENCE_LABEL, best_baseline, device_held_seconds
from cudal1.run.throughput import Throughput
from cudal1.schema import EvalResult
from cudal1.search.transforms import cuda_only

# Baselines by proposer label (search/proposer.py), in the order the tables show them, with the
# short name a narrow table's heading uses.
BASELINES: dict[str, str] = {
    "torch-compile-default": "torch.compile",
    "torch-compile-reduce-overhead": "compile (reduce-overhead)",
    "torch-compile-max-autotune": "compile (max-autotune)",
    "torch-compile-max-autotune-no-cudagraphs": "compile (max-autotune, no graphs)",
    "cuda-graph": "CUDA graph",
    "cudnn-benchmark": "cuDNN benchmark",
    "channels-last": "channels_last",
    "torch-compile-default+channels-last": "torch.compile + channels_last",
    "cuda-graph+cudnn-benchmark": "CUDA graph + cuDNN benchmark",
    "channels-last+cudnn-benchmark": "channels_last + cuDNN benchmark",
}
SHORT: dict[str, str] = {
    "torch-compile-default": "compile",
    "torch-compile-reduce-overhead": "c-RO",
    "torch-compile-max-autotune": "c-MA",
    "torch-compile-max-autotune-no-cudagraphs": "c-MA-ng",
    "cuda-graph": "graph",
    "cudnn-benchmark": "cuDNN",
    "channels-last": "NHWC",
    "torch-compile-default+channels-last": "c+NHWC",
    "cuda-graph+cudnn-benchmark": "graph+cuDNN",
    "channels-last+cudnn-benchmark": "NHWC+cuDNN",
}
CPU = "cpu"


@dataclass(frozen=True)
class Entry:
    """One task in one source: the kept kernel's speedup over eager, and the baselines beside it."""

    source: str
    gpu: str  # the device's name, or "cpu"
    task: str
    level: int
    label: str | None  # the kept kernel (``reference`` when a run kept the reference)
    correct: bool
    speedup: float | None  # kept kernel over eager; None unless correct
    ci_low: float | None = None
    ci_high: float | None = None
    sol_percent: float | None = None  # kept kernel's time against the physical floor
    ref_sol_percent: float | None = None
    baselines: dict[str, float] = field(default_factory=dict)  # label -> its speedup over eager

    def over(self, label: str) -> float | None:
        """The kept kernel's speedup over baseline ``label`` (None when that baseline failed, or
        measured nothing of its own on this device)."""
        base = self.baselines.get(label) if measures(self.gpu, label) else None
        if self.speedup is None or base is None or base <= 0:
            return None
        return 1.0 if label == self.label else self.speedup / base

    def over_best(self) -> float | None:
        """The kept kernel's speedup over the faster of eager and torch.compile (None unless a
        torch.compile baseline verified on this task)."""
        if self.speedup is None or not COMPILE_LABELS & self.baselines.keys():
            return None
        bar = best_baseline(self.baselines)
        return 1.0 if bar.label == self.label else self.speedup / bar.speedup


@dataclass(frozen=True)
class Cost:
    source: str
    kind: str  # "run" or "verify"
    gpu: str
    llm_calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    gpu_seconds: float = 0.0
    wall_s: float = 0.0
    throughput: Throughput | None = None  # a run's (``run.throughput``); None for a verify report
    reward_bar: str | None = None  # a GRPO run's ``reward.bar``: what its reward counted speedups over


@dataclass(frozen=True)
class Source:
    entries: tuple[Entry, ...]
    cost: Cost


def measures(gpu: str, label: str) -> bool:
    """Whether baseline ``label`` on device ``gpu`` measured what its name says: on a CPU a
    CUDA-only baseline ran the reference unchanged."""
    return gpu != CPU or not cuda_only(label)


def _gpu(result: EvalResult | None) -> str:
    if result is None:
        return CPU
    return str(result.environment.gpu or (CPU if result.device == "cpu" else result.device))


def _run_entry(run_dir: str, t: TaskRecord) -> Entry:
    """A run's task: the kept variant (final re-evaluation), or the reference at exactly 1.0x."""
    measured = t.measured
    results = [r for _, r in t.baselines]
    gpu = _gpu(measured or (results[0] if results else t.first_result))
    baselines = {
        label: r.speedup for label, r in t.baselines if r.speedup is not None and measures(gpu, label)
    }
    timing = measured.timing if measured is not None and measured.ok else None
    sol = measured.sol if measured is not None else None
    ref_sol = sol.ref_percent if sol else None
    if t.faster and t.best is not None and timing is not None:
        baselines[t.best.label] = timing.speedup
        return Entry(
            run_dir, gpu, t.name, t.level, t.best.label, True, timing.speedup, timing.ci_low, timing.ci_high,
            sol_percent=sol.cand_percent if sol else None, ref_sol_percent=ref_sol, baselines=baselines,
        )  # fmt: skip
    if t.best is None:
        return Entry(run_dir, gpu, t.name, t.level, None, False, None, baselines=baselines)
    return Entry(
        run_dir, gpu, t.name, t.level, REFERENCE_LABEL, True, 1.0,
        sol_percent=ref_sol, ref_sol_percent=ref_sol, baselines=baselines,
    )  # fmt: skip


def run_source(run: RunRecord) -> Source:
    """A run's tasks, and its cost from the ledger and the device-held seconds."""
    entries = tuple(_run_entry(str(run.run_dir), t) for t in run.tasks)
    cost = Cost(
        str(run.run_dir),
        "run",
        entries[0].gpu if entries else CPU,
        llm_calls=int(run.ledger["calls"]),
        tokens=int(run.ledger["prompt_tokens"]) + int(run.ledger["completion_tokens"]),
        cost_usd=float(run.ledger["cost_usd"]),
        gpu_seconds=run.gpu_seconds,
        wall_s=run.wall_s,
        throughput=run.throughput,
        reward_bar=run.reward_bar,
    )
    return Source(entries, cost)


def verify_source(name: str, report: dict[str, Any]) -> Source:
    """A verify report (``cudal1 verify --json-out PATH``, or its ``--format json``): every record with code, measured on its GPU."""
    results = {int(k): EvalResult.from_dict(v) for k, v in report.get("results", {}).items()}
    default_gpu = str(report.get("environment", {}).get("gpu") or CPU)
    entries = []
    for row in report.get("rows", []):
        if row["status"] in ("no code", "not run", "evaluator error"):  # nothing the candidate did
            continue
        result = results.get(int(row["index"]))
        gpu = _gpu(result) if result is not None else default_gpu
        ok = row["status"] == "verified" and row.get("measured") is not None
        sol = result.sol if result is not None else None
        entries.append(
            Entry(
                name, gpu, row["task"], int(row["level"]), "record", ok, row["measured"] if ok else None,
                row.get("ci_low"), row.get("ci_high"), sol_percent=sol.cand_percent if sol else None,
                ref_sol_percent=sol.ref_percent if sol else None,
            )
        )  # fmt: skip
    held = sum(device_held_seconds(r) for r in results.values())
    return Source(tuple(entries), Cost(name, "verify", default_gpu, gpu_seconds=held))


# -- statistics ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpeedupStats:
    """The paper's statistics over a group of tasks; the speedups cover the correct ones."""

    tasks: int
    correct: int
    faster: int  # above 1.01x
    mean: float | None
    max: float | None
    p75: float | None
    p50: float | None
    p25: float | None
    geomean: float | None


def percentile(xs: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), ``q`` in [0, 100]."""
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def speedup_stats(speedups: Iterable[float | None]) -> SpeedupStats:
    """Statistics of one group: None stands for a task with no correct kernel."""
    values = list(speedups)
    xs = [x for x in values if x is not None]
    if not xs:
        return SpeedupStats(len(values), 0, 0, None, None, None, None, None, None)
    return SpeedupStats(
        tasks=len(values),
        correct=len(xs),
        faster=sum(x > FASTER for x in xs),
        mean=sum(xs) / len(xs),
        max=max(xs),
        p75=percentile(xs, 75),
        p50=percentile(xs, 50),
        p25=percentile(xs, 25),
        geomean=math.exp(sum(math.log(x) for x in xs) / len(xs)) if all(x > 0 for x in xs) else None,
    )


def gpus(entries: Sequence[Entry]) -> list[str]:
    return sorted({e.gpu for e in entries})


def levels(entries: Sequence[Entry]) -> list[int]:
    return sorted({e.level for e in entries})


def baselines_seen(entries: Sequence[Entry]) -> list[str]:
    seen = {label for e in entries for label in e.baselines if measures(e.gpu, label)}
    return [label for label in BASELINES if label in seen]


# -- tables --------------------------------------------------------------------------------------

STAT_COLUMNS = (
    Col("tasks", "n", right=True),
    Col("correct", "ok", right=True),
    Col(f">{FASTER}x", right=True),
    Col("mean", right=True),
    Col("max", right=True),
    Col("p75", right=True),
    Col("p50", right=True),
    Col("p25", right=True),
    Col("geomean", "geo", right=True),
)


def _stat_cells(s: SpeedupStats) -> tuple[Cell, ...]:
    # Without the "x": the title says these are speedups, and nine columns must fit in 80.
    return (
        str(s.tasks),
        str(s.correct),
        str(s.faster),
        *(_num(v) for v in (s.mean, s.max, s.p75, s.p50, s.p25, s.geomean)),
    )


def _num(v: float | None) -> str:
    """Three decimals, or four significant digits for a value too large for them."""
    return "-" if v is None else (f"{v:.3f}" if abs(v) < 1000 else f"{v:.4g}")


def stats_table(entries: Sequence[Entry], gpu: str) -> TableSpec:
    """Per level and overall, on one GPU: the paper's table."""
    mine = [e for e in entries if e.gpu == gpu]
    rows = [
        (f"L{lvl}", *_stat_cells(speedup_stats(e.speedup for e in mine if e.level == lvl)))
        for lvl in levels(mine)
    ]
    rows.append(("all", *_stat_cells(speedup_stats(e.speedup for e in mine))))
    return TableSpec(
        f"speedup (x) over eager on {gpu}, per level (L1, L2, ...) and overall",
        (Col("group"), *STAT_COLUMNS),
        tuple(rows),
        caption="kept kernel over the eager reference; a task that kept the reference counts 1.0x",
    )


def baseline_table(entries: Sequence[Entry], gpu: str) -> TableSpec:
    """The kept kernel against every baseline measured in the same run on the same device."""
    mine = [e for e in entries if e.gpu == gpu]
    rows = [("eager", *_stat_cells(speedup_stats(e.speedup for e in mine)))]
    best = [e.over_best() for e in mine if COMPILE_LABELS & e.baselines.keys()]
    rows += [("best", *_stat_cells(speedup_stats(best)))] if best else []
    seen = baselines_seen(mine)
    for label in seen:
        compared = [e.over(label) for e in mine if label in e.baselines]
        rows.append((SHORT[label], *_stat_cells(speedup_stats(compared))))
    names = ["best: the faster of eager and torch.compile"] if best else []
    legend = ", ".join(names + [f"{SHORT[b]}: {BASELINES[b]}" for b in seen])
    return TableSpec(
        f"speedup (x) over each baseline on {gpu}",
        (Col("over"), *STAT_COLUMNS),
        tuple(rows),
        caption="the kept kernel's time against each baseline's, over the tasks where that baseline "
        f"was correct ({legend})",
    )


def task_table(entries: Sequence[Entry]) -> TableSpec:
    """One row per task and source: what was kept, its speedup, and against each baseline."""
    seen = baselines_seen(entries)
    many = len(gpus(entries)) > 1
    sources = len({e.source for e in entries}) > 1
    columns = [Col("task"), Col("level", "lvl", right=True)]
    columns += [Col("source", drop=1, wrap=True)] if sources else []
    columns += [Col("GPU", drop=2, wrap=True)] if many else []
    columns += [Col("kept", wrap=True), Col("over eager [95% CI]", "eager", right=True, wrap=True)]
    best = any(COMPILE_LABELS & e.baselines.keys() for e in entries)
    # Dropped first at narrow widths: speed of light, then the baselines from the last listed, so
    # that "over torch.compile" goes last of them; then "over best baseline", the source and the GPU.
    columns += [Col("over best baseline", "/best", drop=3, right=True)] if best else []
    columns += [
        Col(f"over {BASELINES[b]}", f"/{SHORT[b]}", drop=4 + k, right=True) for k, b in enumerate(seen)
    ]
    columns += [Col("% of SOL", "SOL%", drop=20, right=True)]
    rows = []
    for e in sorted(entries, key=lambda e: (e.level, e.task, e.gpu, e.source)):
        ci = f" [{e.ci_low:.2f}, {e.ci_high:.2f}]" if e.ci_low is not None and e.ci_high is not None else ""
        row: list[Cell] = [e.task, str(e.level), *([e.source] if sources else []), *([e.gpu] if many else [])]
        row += [e.label or "none correct", fmt_x(e.speedup) + ci if e.speedup is not None else "-"]
        row += [fmt_x(e.over_best())] if best else []
        row += [fmt_x(e.over(b)) for b in seen]
        row.append("-" if e.sol_percent is None else f"{e.sol_percent:.1f}")
        rows.append(tuple(row))
    notes = ["/X: the kept kernel's speedup over baseline X"] if seen else []
    notes += (
        ["best: the faster of eager and torch.compile in the same run (GRPO's reward bar)"] if best else []
    )
    caption = "; ".join(notes)
    return TableSpec("per task", tuple(columns), tuple(rows), caption=caption)


def portability_table(entries: Sequence[Entry]) -> TableSpec | None:
    """The same tasks on different GPUs, side by side (None with results from one GPU only)."""
    names = gpus(entries)
    if len(names) < 2:
        return None
    by_task: dict[tuple[int, str], dict[str, float | None]] = {}
    for e in entries:
        by_task.setdefault((e.level, e.task), {})[e.gpu] = e.speedup
    rows: list[tuple[Cell, ...]] = [
        (task, str(level), *(fmt_x(cells.get(g)) for g in names))
        for (level, task), cells in sorted(by_task.items())
    ]
    geo = [speedup_stats(e.speedup for e in entries if e.gpu == g).geomean for g in names]
    rows.append(("geomean", "", *(fmt_x(v) for v in geo)))
    columns = (Col("task"), Col("level", "lvl", right=True), *(Col(g, right=True, wrap=True) for g in names))
    return TableSpec("portability: speedup over eager on each GPU", columns, tuple(rows))


def cost_table(sources: Sequence[Source]) -> TableSpec:
    rows = tuple(
        (
            c.source, c.kind, c.gpu, str(c.llm_calls), f"{c.tokens:,}", f"${c.cost_usd:.2f}",
            f"{c.gpu_seconds:.0f}", f"{c.wall_s:.0f}" if c.kind == "run" else "-",
        )
        for c in (s.cost for s in sources)
    )  # fmt: skip
    columns = (
        Col("source", wrap=True),
        Col("kind", drop=2),
        Col("device", drop=1, wrap=True),
        Col("LLM calls", "calls", right=True),
        Col("tokens", right=True),
        Col("dollars", "$", right=True),
        Col("device-seconds", "dev-s", right=True),
        Col("wall s", "wall", drop=3, right=True),
    )
    bars = [f"{c.source}: {c.reward_bar}" for c in (s.cost for s in sources) if c.reward_bar]
    notes = ["device-seconds: time the timing device (a GPU, or the CPU) was held alone, for timing"]
    notes += (
        [f"GRPO reward bar ({', '.join(bars)}; best-baseline: the faster of eager and torch.compile)"]
        if bars
        else []
    )
    return TableSpec("cost", columns, rows, caption="; ".join(notes))


def throughput_table(sources: Sequence[Source]) -> TableSpec | None:
    """Each run's evaluations per device-hour, the share of wall time its devices were held, and
    where its evaluations' seconds went (``run.throughput``); None without a run."""
    runs = [(s.cost, s.cost.throughput) for s in sources if s.cost.throughput is not None]
    if not runs:
        return None
    rows = tuple(
        (
            c.source, str(t.evaluations), str(t.devices), _count(t.per_device_hour),
            _count(None if t.held_share is None else 100 * t.held_share),
            *(f"{t.part_s.get(part, 0.0):.0f}" for part in PARTS),
        )
        for c, t in runs
    )  # fmt: skip
    columns = (
        Col("run", wrap=True),
        Col("evaluations", "evals", right=True),
        Col("devices", "dev", drop=3, right=True),
        Col("per device-hour", "/dev-h", right=True),
        Col("held alone %", "alone", right=True),
        Col("build s", "build", drop=2, right=True),
        Col("first calls s", "first", drop=2, right=True),
        Col("correctness s", "check", drop=1, right=True),
        Col("timing s", "time", drop=1, right=True),
    )
    return TableSpec(
        "throughput",
        columns,
        rows,
        caption="per device-hour: evaluations / (wall hours x devices); held alone: the devices' wall "
        "time spent timing (checks share the device); build and first calls run off the device",
    )


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def report_tables(sources: Sequence[Source]) -> list[TableSpec]:
    """Every table of the report, in reading order."""
    entries = [e for s in sources for e in s.entries]
    tables = [stats_table(entries, g) for g in gpus(entries)]
    tables += [
        baseline_table(entries, g)
        for g in gpus(entries)
        if baselines_seen([e for e in entries if e.gpu == g])
    ]
    portability = portability_table(entries)
    tables += [portability] if portability is not None else []
    throughput = throughput_table(sources)
    return [*tables, task_table(entries), cost_table(sources), *([throughput] if throughput else [])]


def report_data(sources: Sequence[Source]) -> dict[str, Any]:
    """The report as JSON-able data: statistics per GPU and level, entries, costs, tables."""
    entries = [e for s in sources for e in s.entries]
    stats = {
        g: {
            **{f"level {lvl}": speedup_stats(e.speedup for e in entries if e.gpu == g and e.level == lvl).__dict__
               for lvl in levels(entries)},
            "all": speedup_stats(e.speedup for e in entries if e.gpu == g).__dict__,
        }
        for g in gpus(entries)
    }  # fmt: skip
    return {
        "stats": stats,
        "entries": [e.__dict__ for e in entries],
        "costs": [_cost_data(s.cost) for s in sources],
        "tables": [t.to_dict() for t in report_tables(sources)],
    }


def _cost_data(cost: Cost) -> dict[str, Any]:
    data = {k: v for k, v in cost.__dict__.items() if k != "throughput"}
    t = cost.throughput
    if t is not None:
        data["throughput"] = {
            "evaluations": t.evaluations,
            "devices": t.devices,
            "wall_s": t.wall_s,
            "held_s": t.held_s,
            "per_device_hour": t.per_device_hour,
            "held_share": t.held_share,
            "seconds_by_part": dict(t.part_s),
        }
    return data
