"""Evaluator benchmark: A-vs-A precision and candidate throughput. Prints tables.

    python benchmarks/evaluator.py --part precision   # each bundled task against itself, 3 repeats
    python benchmarks/evaluator.py --part throughput  # >= 30 mixed candidates, cold then warm cache
    python benchmarks/evaluator.py --part throughput --devices cuda:0,cuda:1 --workers 12  # two GPUs

Precision goal (issue 2): the 95% interval contains 1.0, with half-width <= 1% for tasks of
100 us or more and <= 3% below. Throughput goal: >= 600 candidates per GPU-hour with a warm
compile cache.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_candidates import launch_bound_tasks, mixed_batch, self_candidate  # noqa: E402

from cudal1.config import EvalConfig, load_config  # noqa: E402
from cudal1.eval.pool import EvalPool  # noqa: E402
from cudal1.schema import EvalRequest, EvalResult, Stage  # noqa: E402
from cudal1.tasks import bundled_tasks  # noqa: E402

console = Console(width=160)


def precision(args: argparse.Namespace) -> list[dict]:
    tasks = [t for t in bundled_tasks(args.size) if not args.tasks or t.name in args.tasks]
    cfg = _config(args)
    requests = [
        EvalRequest(t, self_candidate(t), f"{t.name}#{rep}") for rep in range(args.repeats) for t in tasks
    ]
    rows: dict[str, dict] = {}
    with EvalPool(cfg, workers=args.workers, spares=2) as pool:
        for req, res in pool.evaluate_many(requests):
            name = req.task.name
            row = rows.setdefault(name, {"task": name, "level": req.task.level, "runs": []})
            row["runs"].append(_run_summary(res))
            if args.json:  # partial results survive a killed run
                args.json.write_text(json.dumps({"precision_partial": list(rows.values())}))
            rejected = ", ".join(f.code for f in res.findings if f.severity.value == "reject")
            console.print(f"  {req.request_id}: {'ok' if res.ok else 'FAILED ' + (res.error or rejected)[:120]}"
                          + (f" speedup {res.timing.speedup:.4f} +-{100 * res.timing.ci_half_width:.2f}%" if res.timing else ""))
    table = Table(title=f"A-vs-A precision ({args.repeats} repeats, timing budget {args.budget_s}s)")
    # "ref after cand %": how much slower the reference ran right after the candidate than in its
    # clean turns (checks/interference.py; A-vs-A shows the honest order effect, the margin is 10%).
    cols = ("level", "task", "ref ms", "speedups", "CI half-width %", "goal %", "ref after cand %", "contains 1", "pass")
    for col in cols:
        table.add_column(col, justify="right" if col not in ("task",) else "left")
    out = []
    for name in sorted(rows, key=lambda n: (rows[n]["level"], n)):
        row = rows[name]
        runs = row["runs"]
        ok_runs = [r for r in runs if r["ok"]]
        ref_ms = min((r["ref_ms"] for r in ok_runs), default=float("nan"))
        goal = 1.0 if ref_ms >= 0.1 else 3.0
        contains = all(r["ci_low"] <= 1.0 <= r["ci_high"] for r in ok_runs) and len(ok_runs) == len(runs)
        hw_ok = all(r["half_width_pct"] <= goal for r in ok_runs) and len(ok_runs) == len(runs)
        row.update(ref_ms=ref_ms, goal_pct=goal, contains_one=contains, passed=contains and hw_ok)
        table.add_row(
            str(row["level"]),
            name,
            f"{ref_ms:.4f}",
            " ".join(f"{r['speedup']:.4f}" if r["ok"] else "FAIL" for r in runs),
            " ".join(f"{r['half_width_pct']:.2f}" if r["ok"] else "-" for r in runs),
            f"{goal:.0f}",
            " ".join(f"{100 * r['ref_after_cand']['slowdown']:+.1f}" if r.get("ref_after_cand") else "-" for r in runs),
            "yes" if contains else "no",
            "[green]yes[/green]" if row["passed"] else "[red]no[/red]",
        )
        out.append(row)
    console.print(table)
    console.print(_phase_line([r for row in out for r in row["runs"]]))
    passed = sum(r["passed"] for r in out)
    console.print(f"precision: {passed}/{len(out)} tasks meet the goal")
    return out


def _run_summary(res: EvalResult) -> dict:
    if not res.ok or res.timing is None:
        rejected = [f"{f.code}: {f.message}" for f in res.findings if f.severity.value == "reject"]
        return {"ok": False, "error": res.error[:300] or "; ".join(rejected)[:300],
                "ref_after_cand": dict(res.environment.reference_disturbance)}
    t = res.timing
    return {
        "ok": True,
        "device_s": dict(res.environment.device_s),
        "speedup": t.speedup,
        "ci_low": t.ci_low,
        "ci_high": t.ci_high,
        "half_width_pct": 100 * t.ci_half_width,
        "ref_ms": t.ref_median_ms,
        "samples": len(t.ref_ms),
        "calls_per_sample": t.calls_per_sample,
        "stop": t.stop_reason,
        "workers_paused": res.environment.workers_paused_while_timed,
        "ref_after_cand": dict(res.environment.reference_disturbance),
        "ref_ms_raw": list(t.ref_ms),
        "cand_ms_raw": list(t.cand_ms),
        "ref_wall_ms_raw": list(t.ref_wall_ms),
        "cand_wall_ms_raw": list(t.cand_wall_ms),
    }


def throughput(args: argparse.Namespace) -> dict:
    tasks = {t.name: t for t in bundled_tasks(args.size)} | launch_bound_tasks()
    batch = mixed_batch(tasks)
    cache = Path(tempfile.mkdtemp(prefix="cudal1-bench-cache-"))
    cfg = _config(args, f"build_cache={cache}")
    results = {}
    devices = [d for d in args.devices.split(",") if d] if args.devices else []
    gpus = max(len(devices), 1)
    table = Table(title=f"throughput: {len(batch)} candidates, {args.workers} workers, "
                  f"{', '.join(devices) or args.device}, timing budget {args.budget_s}s")
    for col in ("cache", "wall s", "candidates/hour", "candidates/GPU-hour", "ok", "failed", "compile s (sum)", "max compile s", "device s (sum)"):
        table.add_column(col, justify="right")
    for phase in args.phases:
        start = time.perf_counter()
        outcomes = []
        with EvalPool(cfg, workers=args.workers, spares=args.workers, devices=devices) as pool:
            for req, res in pool.evaluate_many(EvalRequest(tasks[t], src, label) for label, t, src in batch):
                outcomes.append((req.request_id, res))
                console.print(f"  {phase} {req.request_id}: {'ok' if res.ok else 'FAILED'} "
                              f"compile {_stage_s(res, Stage.COMPILE):.1f}s on {res.device}")
            per_device = pool.device_counts()
        wall = time.perf_counter() - start
        compile_s = [_stage_s(r, Stage.COMPILE) for _, r in outcomes]
        # What holds the device: correctness and timing (ModelNew and its first calls come before).
        device_s = sum(_stage_s(r, s) for _, r in outcomes for s in (Stage.CORRECTNESS, Stage.TIMING))
        ok = sum(r.ok for _, r in outcomes)
        results[phase] = {
            "wall_s": wall,
            "per_hour": len(outcomes) / wall * 3600,
            "per_gpu_hour": len(outcomes) / wall * 3600 / gpus,
            "per_device": per_device,
            "ok": ok,
            "failed": {label: (r.failed_stage.value if r.failed_stage else "rejected") for label, r in outcomes if not r.ok},
            "compile_s_sum": sum(compile_s),
            "compile_s_max": max(compile_s),
            "device_s_sum": device_s,
        }
        results[phase]["device_phases_s"] = phases = _phase_sums(
            [dict(r.environment.device_s) for _, r in outcomes]
        )
        console.print(f"  {phase}: " + _phase_line([{"device_s": phases}]))
        console.print(f"  {phase}: evaluations per device {per_device}")
        table.add_row(phase, f"{wall:.1f}", f"{len(outcomes) / wall * 3600:.0f}",
                      f"{len(outcomes) / wall * 3600 / gpus:.0f}", str(ok), str(len(outcomes) - ok),
                      f"{sum(compile_s):.1f}", f"{max(compile_s):.1f}", f"{device_s:.1f}")
    console.print(table)
    console.print("expected failures (planted): " + json.dumps(results[args.phases[-1]]["failed"]))
    console.print(_self_table(outcomes))
    results["self_candidates"] = {label: _run_summary(r) for label, r in outcomes if label.startswith("self:")}
    return results


def _self_table(outcomes: list[tuple[str, EvalResult]]) -> Table:
    """The A-vs-A candidates of the (warm) batch: a precision check at the batch's budget."""
    table = Table(title="A-vs-A inside the throughput batch (its last phase)")
    for col in ("candidate", "ref ms", "speedup", "95% CI", "half-width %", "goal %", "pass", "wall x", "samples x K"):
        table.add_column(col, justify="left" if col == "candidate" else "right")
    passed = total = 0
    for label, r in sorted(outcomes):
        if not label.startswith("self:") or r.timing is None:
            continue
        t = r.timing
        goal = 1.0 if t.ref_median_ms >= 0.1 else 3.0
        ok = t.ci_low <= 1.0 <= t.ci_high and 100 * t.ci_half_width <= goal
        passed, total = passed + ok, total + 1
        table.add_row(label, f"{t.ref_median_ms:.4f}", f"{t.speedup:.4f}", f"[{t.ci_low:.4f}, {t.ci_high:.4f}]",
                      f"{100 * t.ci_half_width:.2f}", f"{goal:.0f}", "yes" if ok else "NO",
                      f"{t.wall_speedup:.3f}", f"{len(t.ref_ms)} x {t.calls_per_sample}")
    table.caption = f"{passed}/{total} A-vs-A entries bracket 1.0 within the goal"
    return table


def _phase_sums(per_run: list[dict]) -> dict[str, float]:
    sums: dict[str, float] = {}
    for phases in per_run:
        for name, seconds in phases.items():
            sums[name] = sums.get(name, 0.0) + seconds
    return sums


def _phase_line(runs: list[dict]) -> str:
    """Where the device seconds went, summed over runs (record.EvaluationRecord.phase); the first
    calls run before the device lock, every other phase holds it."""
    sums = _phase_sums([r.get("device_s", {}) for r in runs])
    return "device seconds by phase (first_calls off the lock): " + ", ".join(f"{k} {v:.1f}" for k, v in sums.items())


def _config(args: argparse.Namespace, *extra: str) -> EvalConfig:
    overrides = [f"device={args.device}", f"timing.budget_s={args.budget_s}", *extra, *args.set]
    return load_config(EvalConfig, None, overrides)


def _stage_s(res: EvalResult, stage: Stage) -> float:
    return sum(s.seconds for s in res.stages if s.stage is stage)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["precision", "throughput", "all"], default="all")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--devices", help="throughput: several devices, e.g. cuda:0,cuda:1 (one timing lane each)")
    parser.add_argument("--size", choices=["gpu", "cpu"], default="gpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--budget-s", type=float, default=4.0)
    parser.add_argument("--tasks", nargs="*", help="precision: only these bundled tasks")
    parser.add_argument("--phases", nargs="+", choices=["cold", "warm"], default=["cold", "warm"],
                        help="throughput: build cache cold (nvcc builds beside the timing), then warm")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="evaluator config override, e.g. timing.lead_us=0 (repeatable)")
    args = parser.parse_args()
    report = {}
    if args.part in ("precision", "all"):
        report["precision"] = precision(args)
    if args.part in ("throughput", "all"):
        report["throughput"] = throughput(args)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
