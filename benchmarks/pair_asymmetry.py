"""Which kind of worker process times slower? A-vs-A pairs outside the evaluator, one variable at a time.

    python benchmarks/pair_asymmetry.py [--tasks lb_mlp3 2_conv_block 1_gemm] [--samples 400]
    python benchmarks/pair_asymmetry.py --device cpu --tasks 3_softmax --variants 'reference + prewarm + float64 twin (pool)' --repeats 8
    python benchmarks/pair_asymmetry.py --tasks lb_mlp3 --variants 'candidate (control)' --repeats 6 [--fixed-layout]

Each row times the task's own code in two worker processes with the evaluator's paired timing
(``measure_paired``: fresh inputs per sample, random order, both sides pinned to one CPU) and
prints the median of ref/cand ratios. Side B is always a fresh candidate-kind worker running the
task as ``ModelNew``; side A varies: another candidate-kind worker (the control), a reference
worker built as the pool builds it, and reference workers with one of its steps left out. A row
away from 1.000 where the control is at 1.000 names the step that slows one side's launches.
With ``--repeats N``, each row is N fresh pairs, and the table gives their scatter: the
reproducibility floor that the evaluator's intervals add (``timing.reproducibility_floor`` on a
GPU, ``reproducibility_floor_cpu`` on the CPU) is the 95% half-width it implies. ``--fixed-layout``
starts both sides of every pair without address-space randomisation and with one hash seed
(``sandbox.fixed_layout``): on an H200 (2026-11-28) fresh control pairs of ``lb_mlp3`` read
0.998, 1.020 and 1.046, and the reference kinds scattered as widely either side of 1.0, so the
difference is each process's, not a step of the reference's; run the control with and without
the flag to see whether the layout is it. Made for a GPU
(``--device cpu`` times the CPU build of the bundled tasks); prints a table.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_candidates import launch_bound_tasks, self_candidate  # noqa: E402

from cudal1.config import SandboxConfig, TimingConfig  # noqa: E402
from cudal1.eval.process.protocol import Command, Role  # noqa: E402
from cudal1.eval.process.sandbox import WorkerProcess  # noqa: E402
from cudal1.eval.reference_process import ENTRY as REFERENCE_ENTRY  # noqa: E402
from cudal1.eval.timing.paired import SampleInputs, measure_paired  # noqa: E402
from cudal1.eval.workers import WorkerEndpoint  # noqa: E402
from cudal1.schema import Task  # noqa: E402
from cudal1.tasks import bundled_tasks  # noqa: E402

console = Console()
# A reference worker whose TF32 setter does nothing (a module on PYTHONPATH, run with -m).
NO_TF32_ENTRY = "cudal1_ref_no_tf32"
_NO_TF32 = """
import cudal1.eval.reference_process as r
r._set_tf32 = lambda allowed: None
r.main(r.ReferenceServer())
"""
VARIANTS: dict[str, dict[str, Any]] = {
    "candidate (control)": {},
    "reference, plain": {"role": "reference"},
    "reference + prewarm": {"role": "reference", "prewarm": True},
    "reference + prewarm + float64 twin (pool)": {"role": "reference", "prewarm": True, "float64": True},
    "reference, TF32 setter off": {"role": "reference", "entry": NO_TF32_ENTRY},
}
# One word each, for command lines that split on spaces (gpu-check.sh lanes).
SHORT = dict(zip(("control", "plain", "prewarm", "float64", "no-tf32"), VARIANTS, strict=True))


def start(task: Task, init_args: list[Any], device: str, cpu: int, extra_path: str, *, role: str = "candidate",
          prewarm: bool = False, float64: bool = False, entry: str | None = None,
          fixed_layout: bool = False) -> WorkerProcess:
    sandbox = SandboxConfig(call_timeout_s=120, fixed_layout=fixed_layout)
    env = {"PYTHONPATH": os.pathsep.join([extra_path, str(Path(__file__).resolve().parents[1] / "src")])}
    if role == "reference":
        proc = WorkerProcess(sandbox, role=Role.REFERENCE, entry=entry or REFERENCE_ENTRY, extra_env=env)
    else:
        proc = WorkerProcess(sandbox, role=Role.CANDIDATE, extra_env=env)
    proc.request(Command.LOAD_TASK, source=task.source, name=task.name, path=None)
    if role == "reference":
        if prewarm:
            proc.request(Command.PREWARM)
        proc.request(Command.BUILD, args=init_args, seed=1, device=device, slot="main", float64=float64)
    else:
        proc.request(Command.LOAD_CANDIDATE, source=self_candidate(task), env={})
        proc.request(Command.BUILD, args=init_args, seed=1, device=device, slot="main")
    keys = ["w0", "w1"]
    for i, key in enumerate(keys):
        proc.request(Command.MAKE_INPUTS, seed=100 + i, key=key)
    proc.request(Command.SET_TIMING_INPUTS, keys=keys, flush_bytes=256 << 20, lead_us=100.0)
    proc.pin({cpu})
    return proc


def pair(
    task: Task, variant: dict[str, Any], samples: int, device: str, cpu: int, extra_path: str,
    fixed_layout: bool = False,
) -> tuple[float, float, float, int]:
    init_args = _init_args(task)
    a = start(task, init_args, device, cpu, extra_path, **variant, fixed_layout=fixed_layout)
    b = start(task, init_args, device, cpu, extra_path, fixed_layout=fixed_layout)
    try:
        seeds = itertools.count(10_000)  # each sample's timed inputs, made inside its timed request

        def agree(label: str, want: list[Any], got: list[Any]) -> None:
            if want != got:
                raise RuntimeError(f"{label}: the two workers made different inputs from one seed")

        cfg = TimingConfig(min_samples=samples, max_samples=samples, budget_s=1e6, target_rel_ci=1e-9,
                           check_output_fraction=0.0, reproducibility_floor=0.0,
                           reproducibility_floor_short=0.0)
        out = measure_paired(WorkerEndpoint(a), WorkerEndpoint(b), cfg, lambda s, c, d: None,
                             SampleInputs(lambda: next(seeds), agree))
        return out.estimate.median, out.estimate.ci_low, out.estimate.ci_high, out.calls_per_sample
    finally:
        a.close()
        b.close()


def _init_args(task: Task) -> list[Any]:
    namespace: dict[str, Any] = {}
    exec(compile(task.source, task.name, "exec"), namespace)  # trusted: a bundled task
    torch.manual_seed(1)
    return list(namespace["get_init_inputs"]())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["lb_mlp3", "2_conv_block", "1_gemm"])
    parser.add_argument("--samples", type=int, default=400)
    parser.add_argument("--device", default="cuda:0", help="cuda:N, or cpu for a smoke test")
    parser.add_argument("--variants", nargs="+", choices=[*VARIANTS, *SHORT], default=list(VARIANTS),
                        metavar="SIDE_A", help=f"which kinds of side A (default: all; short: {', '.join(SHORT)})")
    parser.add_argument("--repeats", type=int, default=1,
                        help="fresh process pairs per row; above 1, the table gives their scatter and the "
                             "reproducibility floor it implies (timing.reproducibility_floor[_cpu])")
    parser.add_argument("--fixed-layout", action="store_true",
                        help="both sides of every pair start with sandbox.fixed_layout (no address-space "
                             "randomisation, one hash seed): with --repeats, whether the scatter of fresh "
                             "pairs is the processes' layouts")
    args = parser.parse_args()
    size = "cpu" if args.device == "cpu" else "gpu"
    tasks = {t.name: t for t in bundled_tasks(size)} | launch_bound_tasks()
    extra = tempfile.mkdtemp(prefix="cudal1-asym-")
    Path(extra, f"{NO_TF32_ENTRY}.py").write_text(_NO_TF32)
    cpu = max(os.sched_getaffinity(0))
    if rest := os.sched_getaffinity(0) - {cpu}:  # with one CPU, this process shares it
        os.sched_setaffinity(0, rest)
    layout = ", fixed layout" if args.fixed_layout else ""
    title = f"A-vs-A by kind of side A ({args.samples} paired samples, both sides on CPU {cpu}{layout}"
    table = Table(title=title + (f", {args.repeats} fresh pairs each)" if args.repeats > 1 else ")"))
    cols = ["task", "side A", "K", "ratio A/B", "95% CI"]
    if args.repeats > 1:  # the CI column then spans the fresh pairs' medians
        cols[3:] = ["median ratio", "range of pairs", "sd %", "floor %"]
    for col in cols:
        table.add_column(col, justify="left" if col in ("task", "side A") else "right")
    runs: list[tuple[float, float, float, int]] = []
    try:
        for name in args.tasks:
            for label in (SHORT.get(v, v) for v in args.variants):
                runs = []
                for _ in range(args.repeats):
                    med, lo, hi, k = pair(tasks[name], VARIANTS[label], args.samples, args.device, cpu, extra,
                                          args.fixed_layout)
                    console.print(f"{name:14s} {label:45s} K={k:3d} {med:.4f} [{lo:.4f}, {hi:.4f}]")
                    runs.append((med, lo, hi, k))
                add_row(table, name, label, runs, args.repeats)
                runs = []
    except KeyboardInterrupt:  # a lane's time limit: the rows finished so far still make a table
        # timeout(1) signals the command and then its process group: the second SIGINT would
        # stop the table half printed.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if runs:
            add_row(table, name, label, runs, args.repeats)
        console.print(table)
        raise SystemExit(130) from None
    console.print(table)


def add_row(table: Table, name: str, label: str, runs: list[tuple[float, float, float, int]], repeats: int) -> None:
    """One row: a single pair's median and interval, or the scatter of ``runs`` fresh pairs (a
    row cut short says how many of ``repeats`` it has)."""
    task = name if len(runs) == repeats else f"{name} ({len(runs)} of {repeats})"
    if repeats == 1:
        med, lo, hi, k = runs[0]
        table.add_row(task, label, str(k), f"{med:.4f}", f"[{lo:.4f}, {hi:.4f}]")
        return
    logs = np.log([r[0] for r in runs])
    sd = float(np.std(logs, ddof=1)) if len(runs) > 1 else float("nan")
    # The reproducibility floor this scatter asks for: the 95% half-width of one pair's
    # median around the true 1.0, bias included (root mean square of the log ratios).
    rms = float(np.sqrt(np.mean(logs**2)))
    ks = sorted({r[3] for r in runs})
    table.add_row(task, label, f"{ks[0]}-{ks[-1]}" if len(ks) > 1 else str(ks[0]), f"{np.exp(np.median(logs)):.4f}",
                  f"[{np.exp(logs.min()):.4f}, {np.exp(logs.max()):.4f}]", f"{100 * sd:.2f}",
                  f"{100 * 1.96 * rms:.2f}")


if __name__ == "__main__":
    main()
