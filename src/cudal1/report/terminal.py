"""Rich renderings for the terminal: one evaluation, a task list."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from cudal1.schema import EvalResult, Severity, Task


def render_task_table(tasks: list[Task]) -> Table:
    table = Table(title=f"{len(tasks)} tasks")
    for col in ("level", "name", "origin", "path"):
        table.add_column(col)
    for t in tasks:
        table.add_row(str(t.level), t.name, t.origin, t.path or "")
    return table


def render_eval_result(r: EvalResult) -> Group:
    head = Text()
    if r.ok:
        head.append("PASS", style="bold green")
    elif r.correct and r.rejected:
        head.append("REJECTED", style="bold red")
    else:
        head.append(f"FAILED at {r.failed_stage.value if r.failed_stage else 'timing'}", style="bold red")
    head.append(f"  task {r.task}  device {r.device}  gpu {r.environment.get('gpu') or '-'}")
    parts: list = [head, _stage_table(r)]
    if r.error:
        parts.append(Text(r.error, style="red"))
    if r.correctness is not None:
        c = r.correctness
        parts.append(
            Text(
                f"correctness: {c.passed}/{c.trials} input sets; max abs error {c.max_abs_err:.3g}; "
                f"worst {c.max_rel_err:.3g}x of tolerance (allowed {c.tolerance_scale:.3g}x), against {c.against}"
            )
        )
    if r.timing is not None:
        parts.append(_timing_table(r))
    if r.sol is not None:
        o = r.sol
        parts.append(
            Text(
                f"speed of light ({o.precision}, {o.peaks}): floor {max(o.bytes_floor_ms, o.flops_floor_ms):.4g} ms "
                f"(bytes {o.bytes_floor_ms:.4g} ms, FLOPs {o.flops_floor_ms:.4g} ms); "
                f"reference at {o.ref_percent:.1f}%, candidate at {o.cand_percent:.1f}%"
            )
        )
    if r.findings:
        parts.append(_findings_table(r))
    return Group(*parts)


def _stage_table(r: EvalResult) -> Table:
    table = Table(show_header=True, box=None, pad_edge=False)
    table.add_column("stage")
    table.add_column("ok")
    table.add_column("seconds", justify="right")
    for s in r.stages:
        table.add_row(s.stage.value, "[green]yes[/green]" if s.ok else "[red]no[/red]", f"{s.seconds:.2f}")
    return table


def _timing_table(r: EvalResult) -> Table:
    t = r.timing
    assert t is not None
    table = Table(title="timing (per call)", box=None)
    for col in ("", "reference", "candidate"):
        table.add_column(col, justify="right")
    table.add_row("worker clock ms (median)", f"{t.ref_median_ms:.4f}", f"{t.cand_median_ms:.4f}")
    ref_wall = sorted(t.ref_wall_ms)[len(t.ref_wall_ms) // 2]
    cand_wall = sorted(t.cand_wall_ms)[len(t.cand_wall_ms) // 2]
    table.add_row("trusted clock ms (median)", f"{ref_wall:.4f}", f"{cand_wall:.4f}")
    table.add_row("speedup", f"{t.speedup:.3f}x", f"95% CI [{t.ci_low:.3f}, {t.ci_high:.3f}]")
    table.add_row("trusted-clock speedup", f"{t.wall_speedup:.3f}x", "")
    table.add_row("samples x calls", f"{len(t.ref_ms)} x {t.calls_per_sample}", f"stop: {t.stop_reason}")
    return table


def _findings_table(r: EvalResult) -> Table:
    table = Table(title="findings", box=None)
    for col in ("severity", "code", "stage", "message"):
        table.add_column(col)
    style = {Severity.REJECT: "red", Severity.WARNING: "yellow", Severity.INFO: ""}
    for f in r.findings:
        table.add_row(Text(f.severity.value, style=style[f.severity]), f.code, f.stage.value, f.message)
    return table
