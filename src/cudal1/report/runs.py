"""Rich rendering of an optimisation run: a header (device, model, spend) and one row per task."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from cudal1.search.run import RunSummary, TaskSummary

# The paper counts a task as improved above 1.01x (shared/research/cuda-l1-method.md).
FASTER = 1.01


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _speedup(t: TaskSummary) -> Text:
    if t.speedup is None:
        return Text("-", style="dim")
    style = "green" if t.speedup > FASTER else ("red" if t.speedup < 1 / FASTER else "")
    return Text(f"{t.speedup:.3f}x", style=style)


def _interval(t: TaskSummary) -> str:
    if t.ci_low is None or t.ci_high is None:
        return "-"
    return f"[{t.ci_low:.3f}, {t.ci_high:.3f}]"


def render_run_header(s: RunSummary) -> Table:
    status = "complete" if s.complete else "incomplete (resume with --resume)"
    if s.stop_reason:
        status += f", stopped by {s.stop_reason}"
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("run", s.run_dir)
    grid.add_row("status", status)
    grid.add_row("device", f"{s.device or '-'}  (GPU: {s.gpu or '-'})")
    grid.add_row(
        "proposer", f"{s.llm}, {s.rounds} rounds x {s.samples} samples" if s.llm else "built-in baselines"
    )
    tokens = s.prompt_tokens + s.completion_tokens
    grid.add_row(
        "LLM",
        f"{s.llm_calls} calls, {tokens:,} tokens ({s.prompt_tokens:,} prompt, {s.completion_tokens:,} completion),"
        f" ${s.cost_usd:.2f}",
    )
    grid.add_row("time", f"{s.wall_s:.0f} s wall, {s.gpu_seconds:.0f} s on the timing device")
    return grid


def render_run_table(s: RunSummary) -> Table:
    faster = sum(1 for t in s.tasks if t.speedup is not None and t.speedup > FASTER)
    table = Table(title=f"{len(s.tasks)} tasks, {faster} faster than the reference (>{FASTER}x)")
    for col, justify in (
        ("task", "left"),
        ("level", "right"),
        ("best", "left"),
        ("speedup", "right"),
        ("95% CI", "right"),
        ("correct", "center"),
        ("ref ms", "right"),
        ("best ms", "right"),
        ("evaluated", "right"),
        ("#correct", "right"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for t in s.tasks:
        label = t.best_label or "-"
        if t.best_label and not t.final:
            label += " (search)"
        table.add_row(
            t.task,
            str(t.level),
            label,
            _speedup(t),
            _interval(t),
            Text("yes", style="green") if t.correct else Text("no", style="red"),
            _ms(t.ref_ms),
            _ms(t.cand_ms),
            str(t.evaluated) + (f" (+{t.pending} pending)" if t.pending else ""),
            str(t.correct_count),
        )
    return table


def render_run_summary(s: RunSummary) -> Group:
    return Group(render_run_header(s), Text(""), render_run_table(s))
