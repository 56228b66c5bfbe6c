"""Best-known-kernel benchmark (issue 20): cudal1 against torch.compile and a published kernel,
every number from one run on one GPU. Prints a table.

    python benchmarks/best_known.py RELEASE.jsonl --per-level 10 --seed 2026 --run runs/best-known
    python benchmarks/best_known.py RELEASE.jsonl --per-level 10 --seed 2026 --run runs/best-known --resume

RELEASE is a CUDA-L1 release file (``optimized_cuda_code/h100.json`` of
github.com/deepreinforce-ai/CUDA-L1; fetch it yourself, it is not part of cudal1) or any records
file ``cudal1 verify`` reads. The script draws ``--per-level`` tasks of each level with ``--seed``
among the records that carry a published kernel, writes them to ``RUN/tasks.jsonl``, and runs

    cudal1 optimize RUN/tasks.jsonl --seed RUN/tasks.jsonl --suite full --out RUN/optimize

with the comparison's competitors as baselines (eager is the reference; each torch.compile mode;
CUDA graph), so that they, the published kernel (a seed, re-measured here) and the compositions
over it (torch.compile, CUDA graph, CUDA graph with scoped cuDNN autotuning) go through the one
evaluator in the same run. Each
task's row gives every competitor's speedup over eager, the kernel cudal1 keeps (its final
re-evaluation, with its interval and provenance chain), and the winner. ``--resume`` continues a
run that a time limit or a kill stopped (the optimize run is resumable; nothing is measured twice).
Under a hard time limit, ``--session-s`` stops starting evaluations early enough for those under
way to finish: a kill cancels them, and a torch.compile max-autotune build of a level-3 task can
take five minutes (H100, 2026-11-26: each of three calls cancelled up to 8 evaluations).

The summary states: geometric means over eager and over each task's best torch.compile mode, the
tasks where cudal1's kept kernel is below the best of {torch.compile modes, CUDA graph, the
verified published kernel} beyond its interval (the goal is none), the tasks where a composition
beat both its base and every baseline, and evaluations per GPU-hour over the benchmark's own wall
time, summed over its calls (``wall_log.py``: a call killed with its GPU session still counts up
to its last progress step); a run directory without that record falls back on the run's own.

``--shard K/N`` measures the K-th of N parts of the draw (every N-th task from the K-th) in its
own directory, ``RUN/shard-K-of-N``, so that N lanes of a machine of several GPUs
(``scripts/gpu-check.sh lanes``) measure the benchmark at once, each task's every number still
from one run on one GPU. The report (``--report-only`` too) reads every shard under RUN and
puts them in one table; its evaluations per GPU-hour are over the shards' GPU time added up,
and it names the GPUs when the shards ran on different kinds. On an H200, one run on one GPU with
16 cores made 168 evaluations per GPU-hour with the GPU held 20% of its wall time (2026-11-28):
the builds, not the GPU, set the pace, so one run per GPU is how more GPUs help.

    python benchmarks/best_known.py RELEASE.jsonl --per-level 5 --run runs/best-known --shard 1/4

``--a-vs-a`` (issue 22: identical code must measure 1.0x inside a loaded run) runs optimize with
``--a-vs-a`` and adds the A-vs-A check: the reference, measured as its own candidate in every task
(round 0's anchor, evaluated beside the run's compile builds), as a column of the table, its
summary line (how many intervals contain 1.0, half-widths against the goal, the deciding clock)
and ``a_vs_a`` in the JSON:

    python benchmarks/best_known.py RELEASE.jsonl --per-level 7 --seed 2026 --run runs/a-vs-a --a-vs-a
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import random
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cudal1.report.a_vs_a import AvsAEntry, a_vs_a_line, anchor_entry, summarize_a_vs_a
from cudal1.report.tables import Col, TableSpec, to_markdown
from cudal1.run.directory import RunDirectory, every_final
from cudal1.run.records import TaskRecord, load_run
from cudal1.run.rows import CandidateRow
from cudal1.run.selection import REFERENCE_LABEL, challenger, why_not_ok
from cudal1.schema import Candidate, EvalResult, Task
from cudal1.tasks.cuda_l1 import load_cuda_l1_records
from cudal1.tasks.shard import Shard, part_of
from cudal1.tasks.shard import parse_shard as parse_k_of_n

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wall_log import WALL_FILE, WallLog, total_wall_s  # noqa: E402

COMPILE_MODES = (
    "torch-compile-default",
    "torch-compile-reduce-overhead",
    "torch-compile-max-autotune",
    "torch-compile-max-autotune-no-cudagraphs",
)
GRAPH = "cuda-graph"
SEED_BACKEND = "seed"
COMPOSE_BACKEND = "compose"


# -- drawing the tasks -----------------------------------------------------------------------------


def draw(
    records: Sequence[tuple[Task, Candidate | None]], per_level: int, seed: int
) -> list[tuple[Task, Candidate]]:
    """``per_level`` records of each level, drawn with ``seed`` among those with a kernel; a level
    with fewer gives all it has. Sorted by level, then task name, so a draw reads the same."""
    by_level: dict[int, list[tuple[Task, Candidate]]] = {}
    for task, cand in records:
        if cand is not None:
            by_level.setdefault(task.level, []).append((task, cand))
    rng = random.Random(seed)
    drawn: list[tuple[Task, Candidate]] = []
    for level in sorted(by_level):
        pool = sorted(by_level[level], key=lambda p: p[0].name)
        drawn += rng.sample(pool, min(per_level, len(pool)))
    return sorted(drawn, key=lambda p: (p[0].level, p[0].name))


def write_records(pairs: Sequence[tuple[Task, Candidate]], path: Path, source: Path) -> None:
    """The drawn records in cudal1's export layout (tasks and seeds in one file)."""
    with path.open("w", encoding="utf-8") as out:
        for task, cand in pairs:
            record = {
                "task": task.name,
                "level": task.level,
                "ref_code": task.source,
                "custom_code": cand.source,
                "claimed_speedup": cand.claimed_speedup,
                "label": cand.label or f"published:{source.stem}",
                "origin": task.origin,
            }
            out.write(json.dumps(record) + "\n")


# -- reading the run -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    """One competitor on one task: its speedup over eager, or why it has none."""

    name: str
    speedup: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    status: str = ""  # why there is no speedup (failed, rejected, not evaluated)
    origin: str = ""


@dataclass(frozen=True)
class TaskComparison:
    task: str
    level: int
    compile: tuple[Measured, ...]
    graph: Measured
    published: Measured
    kept: Measured
    kept_backend: str = ""
    composed_win: bool = False  # a composition beat its base and every baseline beyond intervals
    anchor: AvsAEntry | None = None  # the reference as its own candidate (A-vs-A)
    kept_final: bool = False  # the kept kernel's numbers are its final re-evaluation's
    rival_due: str = ""  # a rival whose search figure lies above the kept final: its final is due

    @property
    def best_compile(self) -> Measured | None:
        timed = [m for m in self.compile if m.speedup is not None]
        return max(timed, key=lambda m: m.speedup or 0.0) if timed else None

    @property
    def best_other(self) -> Measured | None:
        """The best of every torch.compile mode, CUDA graph and the verified published kernel."""
        timed = [m for m in (*self.compile, self.graph, self.published) if m.speedup is not None]
        return max(timed, key=lambda m: m.speedup or 0.0) if timed else None

    @property
    def kept_holds(self) -> bool:
        """Whether cudal1's kept kernel is at least the best other one within its interval. Where
        the task keeps the reference (nothing beat it beyond its interval), the best other holds
        it unless that one is faster than eager beyond its own interval: the reference's 1.0 is
        exact, so a rival at 1.0006x [0.976, 1.026] is not faster (L2_21 on an H200)."""
        best = self.best_other
        if best is None or best.speedup is None:
            return True
        if self.kept.origin == REFERENCE_LABEL:
            low = best.ci_low if best.ci_low is not None else best.speedup
            return low <= 1.0
        high = self.kept.ci_high if self.kept.ci_high is not None else self.kept.speedup
        return high is not None and high >= best.speedup


def _standing(row: CandidateRow, finals: Mapping[int, EvalResult]) -> float:
    """``row``'s speedup at its final where it had one (0 for a failed one), else its search's."""
    result = finals.get(row.id)
    return (result.speedup or 0.0) if result is not None else (row.speedup or 0.0)


def _measured(name: str, row: CandidateRow | None, finals: Mapping[int, EvalResult]) -> Measured:
    """``row``'s measurement: its final re-evaluation's where it had one (like with like with the
    kept kernel's; a failed final makes it no rival), else the search's."""
    if row is None:
        return Measured(name, None, status="not run")
    result = finals.get(row.id) or row.result
    if result is None:
        return Measured(name, None, status="pending", origin=row.origin)
    if not result.ok or result.timing is None:
        why = why_not_ok(result)[:60]
        why = f"final failed: {why}" if row.id in finals else why  # incorrect in a fresh build
        return Measured(name, None, status=why, origin=row.origin)
    t = result.timing
    return Measured(name, result.speedup, t.ci_low, t.ci_high, origin=row.origin)


def _kept(record: TaskRecord) -> tuple[Measured, str]:
    if not record.counts.evaluated:  # nothing measured yet: no verdict, not "kept the reference"
        return Measured("none", None, status="not run"), ""
    measured = record.measured
    if not record.faster or record.best is None or measured is None or measured.timing is None:
        return Measured("reference", 1.0, 1.0, 1.0, origin=REFERENCE_LABEL), ""
    t = measured.timing
    best = record.best
    return Measured(best.label, measured.speedup, t.ci_low, t.ci_high, origin=best.origin), best.backend


def compare_task(
    record: TaskRecord, rows: Sequence[CandidateRow], finals: Mapping[int, EvalResult] | None = None
) -> TaskComparison:
    """One task's row. ``finals``: the task's final re-evaluations by candidate id (passed or
    failed), which stand for those candidates' search measurements."""
    finals = finals or {}
    by_label = {r.label: r for r in rows}
    seeds = [r for r in rows if r.backend == SEED_BACKEND]
    # The published kernel as its final says where it had one (a seed incorrect when rebuilt
    # is not the one shown while another passed).
    seed = max(seeds, key=lambda r: _standing(r, finals)) if seeds else None
    published = _measured("published", seed, finals)
    compile_ = tuple(_measured(mode, by_label.get(mode), finals) for mode in COMPILE_MODES)
    graph = _measured(GRAPH, by_label.get(GRAPH), finals)
    kept, backend = _kept(record)
    reference = by_label.get(REFERENCE_LABEL)
    anchor = anchor_entry(record.name, reference.result if reference is not None else None)
    comparison = TaskComparison(
        record.name,
        record.level,
        compile_,
        graph,
        published,
        kept,
        backend,
        anchor=anchor,
        kept_final=record.final is not None,
        rival_due=_rival_due(record, rows, finals),
    )
    return _with_composed_win(comparison, record, rows)


def _rival_due(record: TaskRecord, rows: Sequence[CandidateRow], finals: Mapping[int, EvalResult]) -> str:
    """The label of the candidate the run's next final round re-measures beside the kept one
    (``run.selection.challenger``), or ""."""
    if record.best is None or record.final is None:
        return ""
    passed = {i: r for i, r in finals.items() if r.ok}
    failed = {i for i, r in finals.items() if not r.ok}
    rival = challenger(rows, failed, passed, record.best)
    return rival.label if rival is not None else ""


def _with_composed_win(c: TaskComparison, record: TaskRecord, rows: Sequence[CandidateRow]) -> TaskComparison:
    """Mark a task whose kept kernel is a composition faster than its base and every baseline."""
    if c.kept_backend != COMPOSE_BACKEND or record.best is None or c.kept.ci_low is None:
        return c
    base = next((r for r in rows if r.id == record.best.base_id), None)
    rivals = [m.speedup for m in (*c.compile, c.graph, c.published) if m.speedup is not None]
    if base is not None and base.speedup is not None:
        rivals.append(base.speedup)
    return dataclasses.replace(c, composed_win=all(c.kept.ci_low > s for s in rivals))


def compare_run(run_dir: Path, bench_wall_s: float | None = None) -> tuple[list[TaskComparison], dict]:
    """Every task's comparison, and the run's throughput facts over ``bench_wall_s``, the
    benchmark's own wall time (None: the run's recorded wall time, which a kill loses)."""
    record = load_run(run_dir)
    with RunDirectory(run_dir).open_db() as db:
        rows = {t.name: db.evaluated(t.name) for t in record.tasks}
        # Every final, passed or failed: a rival incorrect in its fresh build is no rival (L3_48's
        # max-autotune-no-cudagraphs kernel, 2.88x in the search).
        finals = {t.name: every_final(db, t.name) for t in record.tasks}
    comparisons = [compare_task(t, rows[t.name], finals[t.name]) for t in record.tasks]
    evaluations = sum(len(r) for r in rows.values()) + sum(len(f) for f in finals.values())
    devices = max(1, len(record.config.pool.devices))
    facts = {
        **throughput_facts(evaluations, devices, bench_wall_s, record.wall_s),
        "gpu_seconds": round(record.gpu_seconds, 1),
        # A session a --session-s limit stopped is not the run's end, though optimize closed it.
        "complete": record.complete and not record.stop_reason,
        "gpu": next(
            (
                r.result.environment.gpu
                for rs in rows.values()
                for r in rs
                if r.result and r.result.environment.gpu
            ),
            None,
        ),
    }
    return comparisons, facts


SHARD_GLOB = "shard-*-of-*"


def shard_dir(bench: Path, shard: Shard) -> Path:
    """Where the K-th of N parts of a benchmark lives."""
    return bench / f"shard-{shard[0]}-of-{shard[1]}"


def parse_shard(value: str) -> Shard:
    """``K/N`` with 1 <= K <= N (argparse's type for ``--shard``)."""
    try:
        return parse_k_of_n(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def bench_parts(bench: Path) -> list[Path]:
    """The benchmark's directories: ``bench`` itself, or its shards where it was run in parts."""
    shards = sorted(d for d in bench.glob(SHARD_GLOB) if (d / "optimize").exists())
    return shards if shards and not (bench / "optimize").exists() else [bench]


def compare_benchmark(bench: Path) -> tuple[list[TaskComparison], dict]:
    """Every task's comparison over the benchmark's parts (one, or its shards), and the facts of
    them all: evaluations and GPU time added up, complete when every part is, the GPUs named."""
    parts = [compare_run(d / "optimize", total_wall_s(d / WALL_FILE)) for d in bench_parts(bench)]
    comparisons = sorted((c for part, _ in parts for c in part), key=lambda c: (c.level, c.task))
    if len(parts) == 1:
        return comparisons, {**parts[0][1], "shards": 1}
    facts = [f for _, f in parts]
    gpu_s = sum(f["wall_s"] * f["devices"] for f in facts)
    evaluations = sum(f["evaluations"] for f in facts)
    gpus = sorted({f["gpu"] for f in facts if f["gpu"]})
    return comparisons, {
        "evaluations": evaluations,
        "wall_s": round(max(f["wall_s"] for f in facts), 1),
        "wall_from": "shards",
        "run_wall_s": round(sum(f["run_wall_s"] for f in facts), 1),
        "devices": sum(f["devices"] for f in facts),
        "gpu_hours": round(gpu_s / 3600.0, 3),
        "evaluations_per_gpu_hour": round(evaluations / (gpu_s / 3600.0), 1) if gpu_s > 0 else None,
        "gpu_seconds": round(sum(f["gpu_seconds"] for f in facts), 1),
        "complete": all(f["complete"] for f in facts),
        "gpu": " / ".join(gpus) or None,
        "shards": len(parts),
    }


def throughput_facts(evaluations: int, devices: int, bench_wall_s: float | None, run_wall_s: float) -> dict:
    """Evaluations per GPU-hour over the benchmark's wall time, or the run's where it has none."""
    wall_s = bench_wall_s if bench_wall_s is not None else run_wall_s
    hours = wall_s / 3600.0
    return {
        "evaluations": evaluations,
        "wall_s": round(wall_s, 1),
        "wall_from": "benchmark" if bench_wall_s is not None else "run",
        "run_wall_s": round(run_wall_s, 1),
        "devices": devices,
        "evaluations_per_gpu_hour": round(evaluations / (hours * devices), 1) if hours > 0 else None,
    }


def throughput_caption(facts: dict) -> str:
    rate = facts["evaluations_per_gpu_hour"]
    if facts.get("shards", 1) > 1:  # the parts ran side by side, one GPU each
        return (
            f"{facts['evaluations']} evaluations in {facts['shards']} shards, {facts['gpu_hours']:.2f} "
            f"GPU-hours (longest {facts['wall_s']:.0f} s): {rate if rate is not None else '-'} per GPU-hour"
        )
    return (
        f"{facts['evaluations']} evaluations in {facts['wall_s']:.0f} s ({facts['wall_from']} wall time)"
        f" on {facts['devices']} GPU(s): {rate if rate is not None else '-'} per GPU-hour"
    )


# -- summary and rendering -------------------------------------------------------------------------


def geomean(values: Sequence[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def a_vs_a_summary(all_tasks: Sequence[TaskComparison]) -> dict:
    """The A-vs-A check over every task's anchor, with its summary line."""
    s = summarize_a_vs_a(c.anchor for c in all_tasks if c.anchor is not None)
    return {"line": a_vs_a_line(s), **s.to_dict()}


def summarize(all_tasks: Sequence[TaskComparison]) -> dict:
    comparisons = [c for c in all_tasks if c.kept.speedup is not None]  # tasks measured so far
    kept = [c.kept.speedup or 1.0 for c in comparisons]
    over_compile = [
        (c.kept.speedup or 1.0) / b.speedup
        for c in comparisons
        if (b := c.best_compile) is not None and b.speedup
    ]
    published_over_compile = [
        c.published.speedup / b.speedup
        for c in comparisons
        if c.published.speedup is not None and (b := c.best_compile) is not None and b.speedup
    ]
    return {
        "tasks": len(all_tasks),
        "tasks_measured": len(comparisons),
        "kept_geomean_over_eager": geomean(kept),
        "kept_geomean_over_best_compile": geomean(over_compile),
        "published_verified": sum(c.published.speedup is not None for c in comparisons),
        "published_geomean_over_best_compile": geomean(published_over_compile),
        # the goal is none; a task counts once every competitor has a result
        "kept_below_best_other": [c.task for c in comparisons if not c.kept_holds],
        "tasks_with_every_competitor": sum(_complete(c) for c in comparisons),
        # kept kernels still at their search's numbers (marked "s"): their finals are to come
        "kept_without_final": [
            c.task
            for c in comparisons
            if not c.kept_final and c.kept.speedup is not None and c.kept.origin != REFERENCE_LABEL
        ],
        # kept kernels with a rival above their final (marked "r"): the rival's final is to come
        "rival_finals_due": {c.task: c.rival_due for c in comparisons if c.rival_due},
        "composed_wins": [
            {"task": c.task, "chain": c.kept.origin, "speedup": c.kept.speedup}
            for c in comparisons
            if c.composed_win
        ],
    }


def _complete(c: TaskComparison) -> bool:
    return all(m.status != "not run" and m.status != "pending" for m in (*c.compile, c.graph, c.published))


def _x(m: Measured | None) -> str:
    if m is None:
        return "-"
    return f"{m.speedup:.2f}" if m.speedup is not None else m.status.split(":")[0][:12] or "-"


def _short(mode: str) -> str:
    return {
        "torch-compile-default": "def",
        "torch-compile-reduce-overhead": "ro",
        "torch-compile-max-autotune": "ma",
        "torch-compile-max-autotune-no-cudagraphs": "ma-ncg",
    }.get(mode, mode)


def table(comparisons: Sequence[TaskComparison], caption: str | None = None, a_vs_a: bool = False) -> Table:
    t = Table(title="speedup over eager, one run, one GPU", caption=caption, show_lines=False)
    columns = ["task", "compile best", "graph", "published", "cudal1 kept [95% CI]", "origin", "winner"]
    for col in columns + (["A-vs-A [95% CI] clock"] if a_vs_a else []):
        t.add_column(col, overflow="fold")
    for c in comparisons:
        t.add_row(*_cells(c), *([_anchor_cell(c.anchor)] if a_vs_a else []))
    if a_vs_a:
        line = a_vs_a_summary(comparisons)["line"]
        t.caption = f"{caption}\n{line}" if caption else line
    return t


def markdown(
    comparisons: Sequence[TaskComparison], summary: dict, facts: dict, command: str, gpu: str
) -> str:
    """The table for the README: full origins (the terminal table cuts them), the command, the
    date, the GPU, the summary and the compositions that beat both sources."""
    columns = ("task", "compile best", "graph", "published", "cudal1 kept [95% CI]", "origin", "winner")
    rows = []
    for c in comparisons:
        cells = list(_cells(c))
        cells[5] = c.kept.origin or "-"
        rows.append(tuple(cells))
    where = f"one run on one {gpu}" if facts.get("shards", 1) == 1 else f"each task's run on one {gpu}"
    spec = TableSpec(
        title=f"speedup over eager, {where}, {datetime.date.today().isoformat()}",
        columns=tuple(Col(h, right=h in {"compile best", "graph", "published"}) for h in columns),
        rows=tuple(rows),
        caption=f"{command}; " + throughput_caption(facts),
    )

    def gm(key: str) -> str:
        return f"{summary[key]:.2f}x" if summary.get(key) is not None else "-"

    lines = [
        to_markdown(spec),
        f"- {summary['tasks_measured']} of {summary['tasks']} tasks measured; kept kernels "
        f"{gm('kept_geomean_over_eager')} over eager and {gm('kept_geomean_over_best_compile')} over "
        f"each task's best torch.compile mode (geometric means); {summary['published_verified']} "
        f"published kernels verify, {gm('published_geomean_over_best_compile')} over that mode.",
        "- kept kernels at their search's numbers (`s`), their final re-measurement still to "
        "come: " + (", ".join(summary.get("kept_without_final", [])) or "none"),
        "- kept kernels with a rival's final still to come (`r`; the rival's search figure lies "
        "above the kept final's interval): "
        + (", ".join(f"{t} ({label})" for t, label in summary.get("rival_finals_due", {}).items()) or "none"),
        "- kept kernel below the best of the others beyond its interval: "
        + (", ".join(summary["kept_below_best_other"]) or "none"),
        "- compositions faster than both sources and every baseline: "
        + (
            "; ".join(f"`{w['task']}` {w['chain']} {w['speedup']:.2f}x" for w in summary["composed_wins"])
            or "none"
        ),
        f"- complete: {'yes' if facts.get('complete') else 'no'}",
    ]
    return "\n".join(lines) + "\n"


def _cells(c: TaskComparison) -> tuple[str, ...]:
    best = c.best_compile
    kept = c.kept
    ci = (
        f" [{kept.ci_low:.2f},{kept.ci_high:.2f}]"
        if kept.ci_low is not None and kept.ci_high is not None
        else ""
    )
    other = c.best_other
    winner = (
        "-"
        if kept.speedup is None
        else "cudal1"
        if other is None or (kept.speedup or 0) >= (other.speedup or 0)
        else other.name
    )
    margin = (kept.speedup or 1.0) / other.speedup if other and other.speedup else None
    return (
        c.task,
        f"{_x(best)} ({_short(best.name)})" if best else "-",
        _x(c.graph),
        _x(c.published),
        (f"{kept.speedup:.2f}{ci}" if kept.speedup is not None else "not run")
        + ("" if c.kept_final or kept.speedup is None or kept.origin == REFERENCE_LABEL else " s")
        + (" r" if c.rival_due else "")
        + ("" if c.kept_holds else " !"),
        kept.origin[:28],
        f"{winner} {margin:.2f}x" if margin else winner,
    )


def _anchor_cell(anchor: AvsAEntry | None) -> str:
    """The anchor's speedup, interval and deciding clock; ``!`` when its interval excludes 1.0."""
    if anchor is None or anchor.speedup is None:
        return (anchor.status if anchor is not None else "not run")[:20]
    ci = f" [{anchor.ci_low:.3f},{anchor.ci_high:.3f}]" if anchor.ci_low is not None else ""
    return f"{anchor.speedup:.3f}{ci} {anchor.clock or '-'}" + ("" if anchor.contains_one else " !")


# The competitors the comparison names, as round-0 baselines: each torch.compile mode and CUDA
# graph (eager is the reference). On the H100 an evaluation of a CUDA-L1 task held the GPU 4-60 s
# (float64 references of large level-1 inputs), so every baseline beyond these costs real time.
BASELINES = (*COMPILE_MODES, GRAPH)
# Transforms composed over each verified published kernel: one compile mode, graph capture, and
# graph capture with cuDNN autotuning scoped to forward.
TRANSFORMS = ("torch-compile-default", "cuda-graph", "cuda-graph+cudnn-benchmark")


def _listed(values: Sequence[str]) -> str:
    return "[" + ",".join(values) + "]"


def optimize_command(args: argparse.Namespace, tasks_file: Path, run: Path) -> list[str]:
    """The ``cudal1 optimize`` command line the benchmark runs."""
    command = [
        sys.executable,
        "-m",
        "cudal1.cli",
        "optimize",
        str(tasks_file),
        "--seed",
        str(tasks_file),
        "--suite",
        "full",
        "--out",
        str(run),
        "--set",
        f"eval.timing.budget_s={args.budget_s}",
        "--set",
        f"final.timing.budget_s={args.final_budget_s}",
        "--set",
        f"baseline_labels={_listed(BASELINES)}",
        "--set",
        f"compose.transforms={_listed(TRANSFORMS)}",
    ]
    if args.workers:
        command += ["--set", f"pool.workers={args.workers}"]
    if args.session_s:
        command += ["--set", f"budget.max_wall_s={args.session_s}"]
    if args.a_vs_a:
        command.append("--a-vs-a")
    if args.resume and (run / "candidates.db").exists():
        command.append("--resume")
    for item in args.set or ():
        command += ["--set", item]
    return command


def run_optimize(args: argparse.Namespace, tasks_file: Path, run: Path, wall: WallLog) -> int:
    command = optimize_command(args, tasks_file, run)
    print("$", " ".join(command), flush=True)
    # Ctrl-C (or `timeout -s INT`) reaches optimize, which stops cleanly and keeps what it stored;
    # this process waits for it instead of killing it (what subprocess.call does on an interrupt).
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return wall.wait(subprocess.Popen(command, preexec_fn=_default_sigint))
    finally:
        signal.signal(signal.SIGINT, previous)


def _command_line(argv: Sequence[str] | None) -> str:
    words = list(sys.argv[1:] if argv is None else argv)
    return " ".join(["python benchmarks/best_known.py", *words])


COMMANDS_FILE = "commands.txt"  # each call's command line, the first one the run's own


def _run_command(bench: Path, argv: Sequence[str] | None) -> str:
    """The command that started the benchmark, and how many calls resumed it; else this one."""
    path = bench / COMMANDS_FILE
    calls = path.read_text().splitlines() if path.exists() else []
    if not calls:
        return f"`{_command_line(argv)}`"
    more = len(calls) - 1
    return f"`{calls[0]}`" + (f", then {more} call{'s' * (more != 1)} with `--resume`" if more else "")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("records", type=Path, help="CUDA-L1 release file or cudal1 export")
    ap.add_argument("--run", type=Path, default=Path("runs/best-known"), help="benchmark directory")
    ap.add_argument("--per-level", type=int, default=10, help="tasks drawn per level")
    ap.add_argument("--seed", type=int, default=2026, help="seed of the draw")
    ap.add_argument("--workers", type=int, default=0, help="evaluation workers (default: the pool's)")
    ap.add_argument("--budget-s", type=float, default=1.0, help="timing budget per search evaluation")
    ap.add_argument(
        "--final-budget-s", type=float, default=3.0, help="timing budget of the final re-evaluation"
    )
    ap.add_argument("--set", action="append", help="more optimize config overrides")
    ap.add_argument("--resume", action="store_true", help="continue the run in --run")
    ap.add_argument(
        "--session-s",
        type=float,
        default=0.0,
        help="start no evaluation after this many seconds; those under way finish and are kept "
        "(a call with a hard time limit loses none of its work); --resume goes on",
    )
    ap.add_argument(
        "--a-vs-a",
        action="store_true",
        help="A-vs-A check: the reference measured as its own candidate in every task, as a column, "
        "a summary line (intervals containing 1.0, half-widths, clocks) and 'a_vs_a' in the JSON",
    )
    ap.add_argument(
        "--shard",
        type=parse_shard,
        metavar="K/N",
        help="measure the K-th of N parts of the draw in RUN/shard-K-of-N (one lane of a machine of "
        "several GPUs each); the report reads every shard under RUN",
    )
    ap.add_argument("--report-only", action="store_true", help="print the table of the run as it stands")
    ap.add_argument("--json", type=Path, help="write rows and summary here")
    ap.add_argument(
        "--markdown",
        type=Path,
        help="write the table as Markdown for the README (with the command, date and GPU)",
    )
    args = ap.parse_args(argv)

    bench = shard_dir(args.run, args.shard) if args.shard else args.run
    bench.mkdir(parents=True, exist_ok=True)
    tasks_file, run = bench / "tasks.jsonl", bench / "optimize"
    if not args.report_only:
        with (bench / COMMANDS_FILE).open("a" if args.resume else "w") as out:
            out.write(_command_line(argv) + "\n")  # the README table names the run's command
        wall = WallLog(bench / WALL_FILE, fresh=not args.resume)
        if not (args.resume and tasks_file.exists()):
            drawn = draw(load_cuda_l1_records(args.records), args.per_level, args.seed)
            drawn = part_of(drawn, args.shard)  # the draw is sorted by level: each part gets every level
            write_records(drawn, tasks_file, args.records)
            print(f"drew {len(drawn)} tasks with seed {args.seed}: {', '.join(t.name for t, _ in drawn)}")
        rc = run_optimize(args, tasks_file, run, wall)
        if rc != 0:
            print(f"optimize exited {rc}; the table shows what the run holds (resume with --resume)")
    comparisons, facts = compare_benchmark(args.run)
    summary = summarize(comparisons)
    if args.a_vs_a:
        summary["a_vs_a"] = a_vs_a_summary(comparisons)
    console = Console(width=140)
    console.print(table(comparisons, throughput_caption(facts), a_vs_a=args.a_vs_a))
    console.print(json.dumps({**summary, **facts}, indent=1))
    if args.markdown:
        args.markdown.write_text(
            markdown(
                comparisons,
                summary,
                facts,
                _run_command(bench_parts(args.run)[0], argv),
                facts["gpu"] or "GPU",
            )
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"rows": [asdict(c) for c in comparisons], "summary": summary, "facts": facts}, indent=1
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
