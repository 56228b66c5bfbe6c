"""Pool throughput benchmark: the search loop over K tasks x the built-in baselines, as `cudal1
optimize` runs it with no LLM, with the pool's workers sampled while it runs. Prints evaluations
per device-hour, the share of wall time the devices were held, the seconds by part (build, first
calls, correctness, timing) and how many workers were busy over time.

    python benchmarks/throughput.py --tasks-from .data/cuda-l1-h100.jsonl --limit 19 --workers 6
    python benchmarks/throughput.py --limit 3 --set eval.first_calls=0   # first calls under the lock
    python benchmarks/throughput.py --size cpu --limit 2 --device cpu --workers 2   # small, on CPU

The measurement this is for (issue 20): on one H100 with 6 workers, `cudal1 optimize` with the
built-in baselines over 19 CUDA-L1 tasks did 53 evaluations in 8 minutes (about 400 per
GPU-hour) with 3 of 6 workers busy. A worker is busy when its evaluation builds (static checks,
import, ModelNew, first calls) or holds a device; it waits for memory admission or the device
lock otherwise (``eval.activity.PoolState``). The run directory is a temporary one unless --run-dir.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from cudal1.config import OptimizeConfig, load_config
from cudal1.eval.activity import POOL_STATES, PoolState
from cudal1.eval.pool import Pool
from cudal1.eval.pool_kinds import make_pool
from cudal1.llm import Ledger
from cudal1.run.directory import RunDirectory, add_wall_time, start_session
from cudal1.run.records import read_run
from cudal1.run.throughput import Throughput
from cudal1.schema import Task
from cudal1.search.budget import Budget
from cudal1.search.contrastive import ContrastivePlan, Search
from cudal1.tasks import bundled_tasks, load_tasks

BUCKETS = 10  # the busy-workers timeline, in tenths of the wall time


@dataclass
class Sampler:
    """Polls a local pool's ``activity()`` from a thread (a Ray pool has none: no timeline)."""

    pool: Pool
    every_s: float
    samples: list[tuple[float, dict[PoolState, int]]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        if hasattr(self.pool, "activity"):
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()

    def _poll(self) -> None:
        start = time.monotonic()
        while not self._stop.wait(self.every_s):
            self.samples.append((time.monotonic() - start, self.pool.activity()))  # type: ignore[attr-defined]

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


@dataclass(frozen=True)
class Outcome:
    throughput: Throughput
    workers: int
    samples: list[tuple[float, dict[PoolState, int]]]

    def busy_share(self) -> float | None:
        """Workers building or holding a device, over all of them, averaged over the samples."""
        return _busy(self.samples, self.workers)

    def timeline(self) -> list[dict[str, Any]]:
        """Per tenth of the wall time: mean workers in each state, and the busy share."""
        if not self.samples:
            return []
        end = self.samples[-1][0] or 1.0
        buckets: list[list[dict[PoolState, int]]] = [[] for _ in range(BUCKETS)]
        for t, counts in self.samples:
            buckets[min(BUCKETS - 1, int(BUCKETS * t / end))].append(counts)
        return [
            {
                "from_s": i * end / BUCKETS,
                **{state: _mean([c[state] for c in b]) for state in POOL_STATES},
                "busy_share": _busy([(0.0, c) for c in b], self.workers),
            }
            for i, b in enumerate(buckets)
        ]

    def to_dict(self) -> dict[str, Any]:
        t = self.throughput
        return {
            "evaluations": t.evaluations,
            "devices": t.devices,
            "wall_s": t.wall_s,
            "per_device_hour": t.per_device_hour,
            "held_share": t.held_share,
            "seconds_by_part": dict(t.part_s),
            "workers": self.workers,
            "busy_share": self.busy_share(),
            "timeline": self.timeline(),
        }


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _busy(samples: Sequence[tuple[float, dict[PoolState, int]]], workers: int) -> float | None:
    busy = [c["building"] + c["on_device"] for _, c in samples]
    mean = _mean(busy)
    return None if mean is None else mean / max(workers, 1)


def run_benchmark(
    tasks: Sequence[Task], config: OptimizeConfig, run_dir: Path, every_s: float = 0.25
) -> Outcome:
    """Round 0 (built-in baselines and the reference anchor) of every task on one pool, as
    `cudal1 optimize` runs it with no LLM and no final re-evaluation."""
    run = RunDirectory(run_dir)
    run.check_start(tasks, resume=False)
    started = time.monotonic()
    with run.session() as db:
        run_id = start_session(db, run, tasks, config, note="throughput benchmark")
        plan = ContrastivePlan(config, None)
        try:
            with make_pool(config.eval, config.pool) as pool:
                sampler = Sampler(pool, every_s)
                sampler.start()
                try:
                    search = Search(db, pool, plan, Budget(config.budget, Ledger()), run_id=run_id)
                    asyncio.run(search.run(tasks))
                finally:
                    sampler.stop()
                workers = pool.capacity
        finally:
            add_wall_time(db, time.monotonic() - started)
        record = read_run(run, db, config)
    return Outcome(record.throughput, workers, sampler.samples)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _num(x: float | None, fmt: str = ".1f") -> str:
    return "-" if x is None else format(x, fmt)


def print_outcome(outcome: Outcome, console: Console) -> None:
    t = outcome.throughput
    summary = Table(title=f"throughput: {t.evaluations} evaluations, {outcome.workers} workers")
    for col in ("wall s", "devices", "per device-hour", "devices held", "workers busy"):
        summary.add_column(col, justify="right")
    summary.add_row(
        f"{t.wall_s:.0f}", str(t.devices), _num(t.per_device_hour, ".0f"), _pct(t.held_share),
        _pct(outcome.busy_share()),
    )  # fmt: skip
    console.print(summary)
    console.print("seconds by part: " + ", ".join(f"{part} {s:.0f}" for part, s in t.part_s.items()))
    timeline = Table(title="workers over time (mean per tenth of the wall time)")
    for col in ("from s", *POOL_STATES, "busy"):
        timeline.add_column(col, justify="right")
    for row in outcome.timeline():
        timeline.add_row(
            f"{row['from_s']:.0f}", *(_num(row[s]) for s in POOL_STATES), _pct(row["busy_share"])
        )
    console.print(timeline)


def _tasks(args: argparse.Namespace) -> list[Task]:
    tasks = load_tasks(args.tasks_from) if args.tasks_from else bundled_tasks(args.size)
    return tasks[: args.limit] if args.limit else tasks


def _config(args: argparse.Namespace) -> OptimizeConfig:
    overrides = [f"suite={args.suite}", f"eval.device={args.device}", *args.set]
    if args.workers:
        overrides.append(f"pool.workers={args.workers}")
    if args.size:
        overrides.append(f"size={args.size}")
    return load_config(OptimizeConfig, args.config, overrides)


def main(argv: Sequence[str] | None = None) -> Outcome:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks-from", type=Path, help="a task file, KernelBench directory or records file")
    parser.add_argument("--size", choices=["gpu", "cpu"], default="gpu", help="bundled tasks' size")
    parser.add_argument("--limit", type=int, default=0, help="the first K tasks only")
    parser.add_argument("--suite", choices=["quick", "full"], default="full", help="baselines and budgets")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--workers", type=int, default=0, help="pool workers (default: the config's)")
    parser.add_argument("--config", type=Path, help="an optimize config YAML")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="optimize config override, e.g. eval.first_calls=0 (repeatable)")  # fmt: skip
    parser.add_argument("--sample-s", type=float, default=0.25, help="how often the workers are sampled")
    parser.add_argument("--run-dir", type=Path, help="keep the run here (default: a temporary directory)")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="cudal1-throughput-")) / "run"
    outcome = run_benchmark(_tasks(args), _config(args), run_dir, args.sample_s)
    print_outcome(outcome, Console(width=100))
    if args.json:
        args.json.write_text(json.dumps(outcome.to_dict(), indent=2))
    return outcome


if __name__ == "__main__":
    main()
