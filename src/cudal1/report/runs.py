"""Rich rendering of an optimisation run: a header (device, model, spend) and one row per task."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from cudal1.search.loop import REFERENCE_LABEL
from cudal1.search.run import RunSummary, TaskSummary

# The paper counts a task as improved above 1.01x (shared/research/cuda-l1-method.md).
FASTER = 1.01


def fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _speedup(t: TaskSummary) -> Text:
    if t.speedup is None:
        return Text("-", style="dim")
    style = "green" if t.speedup > FASTER else ("red" if t.speedup < 1 / FASTER else "")
    return Text(f"{t.speedup:.3f}x", style=style)


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
    faster = sum(
        1 for t in s.tasks if t.speedup is not None and t.speedup > FASTER and t.best_label != REFERENCE_LABEL
    )
    table = Table(
        title=f"{len(s.tasks)} task{'' if len(s.tasks) == 1 else 's'}, {faster} faster than the reference (>{FASTER}x)",
        box=box.SIMPLE_HEAD,
        caption="speedup, CI and times from the final re-evaluation; (search): not re-evaluated yet",
    )
    table.add_column("task", no_wrap=True, min_width=max((len(t.task) for t in s.tasks), default=4))
    table.add_column("lvl", justify="right")
    table.add_column("best")
    table.add_column("speedup [95% CI]", justify="right")
    table.add_column("correct", justify="center")
    for col in ("ref ms", "best ms", "evaluated", "#correct"):
        table.add_column(col, justify="right")
    for t in s.tasks:
        label = t.best_label or "-"
        if t.best_label and not t.final:
            label += " (search)"
        speedup = _speedup(t)
        if t.ci_low is not None and t.ci_high is not None:
            speedup.append(f" [{t.ci_low:.2f}, {t.ci_high:.2f}]", style="dim")
        table.add_row(
            t.task,
            str(t.level),
            label,
            speedup,
            Text("yes", style="green") if t.correct else Text("no", style="red"),
            fmt_ms(t.ref_ms),
            fmt_ms(t.cand_ms),
            str(t.evaluated) + (f" (+{t.pending} pending)" if t.pending else ""),
            str(t.correct_count),
        )
    return table


def render_run_summary(s: RunSummary) -> Group:
    return Group(render_run_header(s), Text(""), render_run_table(s))
