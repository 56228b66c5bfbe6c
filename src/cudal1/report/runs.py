"""An optimisation run's summary: built from what the run holds (``summarize_run``), and its rich
rendering (a header with device, model and spend, then one row per task).

``summarize_run`` is pure: ``search.optimize`` reads the run directory into a ``RunRecord``; this
module decides which numbers a task reports (the final re-evaluation's, when there is one).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Literal

from rich.console import Group
from rich.table import Table
from rich.text import Text

from cudal1.report.a_vs_a import (
    AvsASummary,
    a_vs_a_facts,
    a_vs_a_line,
    a_vs_a_table,
    anchor_entry,
    summarize_a_vs_a,
)
from cudal1.report.clocks import CLOCK_CAPTION, clock_mark
from cudal1.report.tables import Cell, Col, TableSpec, to_markdown, to_rich
from cudal1.run.records import RunRecord, TaskRecord
from cudal1.run.selection import PARTS, REFERENCE_LABEL
from cudal1.schema import EvalResult, TimingClock

# The paper counts a task as improved above 1.01x (shared/research/cuda-l1-method.md).
FASTER = 1.01

# A task's result: a variant kept because it beats the reference beyond its interval, or the
# reference kept (``search.optimize.TaskRecord.faster``); or nothing yet, for a task none of whose
# candidates has a result (a run killed or stopped by its budget before the task's turn).
Outcome = Literal["faster", "no faster variant found", "no correct variant", "not evaluated"]
FASTER_FOUND: Outcome = "faster"
NOT_EVALUATED: Outcome = "not evaluated"


@dataclass(frozen=True)
class TaskSummary:
    """A task's outcome and the best variant the search tried (``best_*``); speedup, interval and
    times are that variant's, from the final re-evaluation when ``final``. Unless ``outcome`` is
    "faster", the kept kernel is the reference (speedup 1.0 by definition); "not evaluated" keeps
    nothing and reports no speedup."""

    task: str
    level: int
    outcome: Outcome
    best_id: int | None
    best_label: str | None
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    correct: bool
    ref_ms: float | None
    cand_ms: float | None
    final: bool
    search_speedup: float | None
    evaluated: int
    correct_count: int
    parse_failed: int
    pending: int
    rounds_done: int
    # The best variant's provenance chain ("seed cuda-l1:h100 > cuda-graph"; "" for a model's
    # reply) and, for a seed, the speedup its source claimed (measured elsewhere).
    origin: str = ""
    claimed_speedup: float | None = None
    # The clock that decided ``speedup`` (``Timing.clock``) and the events' figure beside it.
    clock: TimingClock | None = None
    event_speedup: float | None = None
    # Faster variants not kept because they failed their final re-evaluation: (label, why).
    failed_finals: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RunSummary:
    run_dir: str
    llm: str | None
    rounds: int
    samples: int
    device: str | None
    gpu: str | None
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    gpu_seconds: float
    wall_s: float
    stop_reason: str | None
    complete: bool
    tasks: tuple[TaskSummary, ...]
    # Throughput (``run.throughput``): every stored evaluation, final re-evaluations included.
    evaluations: int = 0
    devices: int = 1
    evaluations_per_device_hour: float | None = None
    device_held_share: float | None = None  # of the devices' wall time
    seconds_by_part: dict[str, float] = dataclasses.field(default_factory=dict)  # ``selection.Part``
    # The reference anchors' A-vs-A check, in a run with ``a_vs_a`` (``report.a_vs_a``).
    a_vs_a: AvsASummary | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSummary:
        a_vs_a = AvsASummary.from_dict(d["a_vs_a"]) if d.get("a_vs_a") else None
        tasks = tuple(
            TaskSummary(**{**t, "failed_finals": tuple(tuple(p) for p in t.get("failed_finals", ()))})
            for t in d["tasks"]
        )
        return cls(**{**d, "tasks": tasks, "a_vs_a": a_vs_a})


def _task_summary(t: TaskRecord) -> tuple[TaskSummary, EvalResult | None]:
    """The task's row, and the result that shows its device (the reported one, else any)."""
    best = t.best
    result = t.final if t.final is not None else (best.result if best else None)
    timing = result.timing if result is not None and result.ok else None
    outcome = _outcome(t)
    summary = TaskSummary(
        task=t.name,
        level=t.level,
        outcome=outcome,
        best_id=best.id if best else None,
        best_label=best.label if best else None,
        speedup=result.speedup if result else None,
        ci_low=timing.ci_low if timing else None,
        ci_high=timing.ci_high if timing else None,
        correct=bool(result and result.correct),
        ref_ms=timing.ref_median_ms if timing else None,
        cand_ms=timing.cand_median_ms if timing else None,
        final=t.final is not None,
        search_speedup=best.speedup if best else None,
        evaluated=t.counts.evaluated,
        correct_count=t.counts.correct,
        parse_failed=t.counts.parse_failed,
        pending=t.counts.pending,
        rounds_done=t.rounds_done,
        origin=best.origin if best else "",
        claimed_speedup=best.claimed_speedup if best else None,
        clock=timing.clock if timing else None,
        event_speedup=timing.events_figure if timing else None,
        failed_finals=t.failed_finals,
    )
    return summary, result or t.first_result


def _outcome(t: TaskRecord) -> Outcome:
    if t.faster:
        return FASTER_FOUND
    if t.best is not None:
        return "no faster variant found"
    return "no correct variant" if t.counts.evaluated else NOT_EVALUATED


def summarize_run(run: RunRecord) -> RunSummary:
    """The run's summary: one row per task, the run's device, LLM spend and bookkeeping."""
    rows, results = [], []
    for task in run.tasks:
        summary, result = _task_summary(task)
        rows.append(summary)
        if result is not None:
            results.append(result)
    env = next((r for r in results if r.environment.gpu), results[0] if results else None)
    return RunSummary(
        run_dir=str(run.run_dir),
        llm=run.llm,
        rounds=run.config.rounds if run.config is not None else 0,
        samples=run.config.samples if run.config is not None else 0,
        device=env.device if env else None,
        gpu=env.environment.gpu if env else None,
        llm_calls=run.ledger["calls"],
        prompt_tokens=run.ledger["prompt_tokens"],
        completion_tokens=run.ledger["completion_tokens"],
        cost_usd=run.ledger["cost_usd"],
        gpu_seconds=run.gpu_seconds,
        wall_s=run.wall_s,
        stop_reason=run.stop_reason,
        complete=run.complete,
        tasks=tuple(rows),
        evaluations=run.throughput.evaluations,
        devices=run.throughput.devices,
        evaluations_per_device_hour=run.throughput.per_device_hour,
        device_held_share=run.throughput.held_share,
        seconds_by_part={str(k): v for k, v in run.throughput.part_s.items()},
        a_vs_a=run_a_vs_a(run) if run.config is not None and run.config.a_vs_a else None,
    )


def run_a_vs_a(run: RunRecord) -> AvsASummary:
    """Every task's reference anchor as round 0 measured it, inside the run."""
    return summarize_a_vs_a(anchor_entry(t.name, dict(t.baselines).get(REFERENCE_LABEL)) for t in run.tasks)


def render_run_json(summary: RunSummary) -> str:
    """``summary`` as the JSON of ``summary.json`` and ``cudal1 runs show --format json``."""
    return json.dumps(summary.to_dict(), indent=2) + "\n"


def fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def fmt_x(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}x"


def _speedup_cell(
    speedup: float | None, ci: tuple[float | None, float | None], clock: TimingClock | None = None
) -> Text:
    if speedup is None:
        return Text("-", style="dim")
    style = "green" if speedup > FASTER else ("red" if speedup < 1 / FASTER else "")
    text = Text(f"{speedup:.3f}x{clock_mark(clock)}", style=style)
    if ci[0] is not None and ci[1] is not None:
        text.append(f" [{ci[0]:.2f}, {ci[1]:.2f}]", style="dim")
    return text


def device_text(s: RunSummary) -> str:
    """The device a run timed on, as what it is: a named GPU, or the CPU (wall-clock timing)."""
    if s.device is None:
        return "-"
    if s.device == "cpu":
        return "cpu (no GPU; timed by wall clock)"
    return f"{s.device} ({s.gpu or 'GPU name not recorded'})"


def render_run_header(s: RunSummary) -> Table:
    status = "complete" if s.complete else "incomplete (resume with --resume)"
    if s.stop_reason:
        status += f", stopped by {s.stop_reason}"
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row("run", s.run_dir)
    grid.add_row("status", status)
    grid.add_row("device", device_text(s))
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
    grid.add_row("throughput", throughput_line(s))
    grid.add_row("seconds", parts_line(s))
    if s.a_vs_a is not None:
        grid.add_row("A-vs-A", a_vs_a_facts(s.a_vs_a))
    return grid


def throughput_line(s: RunSummary) -> str:
    """Evaluations per device-hour and the devices' held share, in one line of about 60 columns."""
    # The CPU's results carry a "gpu" name too (the processor's): the device decides the word.
    unit = "device" if s.device in (None, "cpu") else "GPU"
    rate = s.evaluations_per_device_hour
    line = f"{s.evaluations} evaluations on {s.devices} {unit}{'' if s.devices == 1 else 's'}"
    if rate is not None:
        line += f", {rate:.0f} per {unit}-hour"
    if s.device_held_share is not None:
        line += f"; timing held it {100 * s.device_held_share:.0f}% of the wall time"
    return line


def parts_line(s: RunSummary) -> str:
    """Where the evaluations' seconds went: off the device, sharing it, holding it alone."""
    part = {name: s.seconds_by_part.get(name, 0.0) for name in PARTS}
    return (
        f"build {part['build']:.0f}, first calls {part['first calls']:.0f} (beside others); "
        f"checks {part['correctness']:.0f} (device shared); timing {part['timing']:.0f} (alone)"
    )


# Dropped first at narrow widths: counts, then times, then the variant a slow task tried, then
# the level (the task's name says it, in the bundled suite and in KernelBench).
RUN_COLUMNS = (
    Col("task"),
    Col("level", "lvl", drop=2, right=True),
    Col("kept"),
    Col("speedup [95% CI]", "speedup", right=True, wrap=True),
    Col("best tried, not kept", "tried", drop=3, wrap=True),
    Col("ref ms", "ref", drop=4, right=True),
    Col("kept ms", drop=4, right=True),
    Col("evaluated", "evals", drop=5, right=True),
    Col("#correct", "ok", drop=5, right=True),
)


def _run_row(t: TaskSummary) -> tuple[Cell, ...]:
    faster = t.outcome == FASTER_FOUND
    if t.outcome == NOT_EVALUATED:
        pending = f"{t.pending} pending" if t.pending else "-"
        return (t.task, str(t.level), "-", Text("not evaluated", style="dim"), "-", "-", "-", pending, "0")
    if faster:
        kept = (t.best_label or "-") + ("" if t.final else " (search)")
        speedup, tried = _speedup_cell(t.speedup, (t.ci_low, t.ci_high), t.clock), "-"
    else:
        kept, speedup = "reference", Text("1.000x", style="dim")
        tried = (
            "-"
            if t.best_label in (None, REFERENCE_LABEL)
            else f"{t.best_label} {fmt_x(t.speedup)}{clock_mark(t.clock)}"
        )
    return (
        t.task,
        str(t.level),
        kept,
        speedup,
        tried,
        fmt_ms(t.ref_ms),
        fmt_ms(t.cand_ms if faster else t.ref_ms),
        str(t.evaluated) + (f" (+{t.pending} pending)" if t.pending else ""),
        str(t.correct_count),
    )


def run_table(s: RunSummary) -> TableSpec:
    """One row per task: the kept kernel (the reference unless a variant is faster beyond its
    interval) and its speedup, from the final re-evaluation."""
    faster = sum(1 for t in s.tasks if t.outcome == FASTER_FOUND)
    n = len(s.tasks)
    return TableSpec(
        title=f"{n} task{'' if n == 1 else 's'}, {faster} with a faster variant (95% CI above 1.0)",
        columns=RUN_COLUMNS,
        rows=tuple(_run_row(t) for t in s.tasks),
        caption="speedup and CI from the final re-evaluation; (search): not re-evaluated yet;"
        " kept 'reference': no variant beat it beyond its 95% interval; not evaluated: no result yet"
        + ("; " + CLOCK_CAPTION if any(clock_mark(t.clock) for t in s.tasks) else ""),
    )


def origin_lines(s: RunSummary) -> list[str]:
    """Where each kept kernel came from, when that says more than its label: a seed (and what
    its source claimed) or a chain of transforms, e.g. ``3_softmax: seed cuda-l1:h100 >
    cuda-graph (claimed 1.960x)``. Built-in baselines (origin = label) and model replies (no
    origin) need no line."""
    lines = []
    for t in s.tasks:
        if t.outcome != FASTER_FOUND or not t.origin or t.origin == t.best_label:
            continue
        claim = f" (claimed {fmt_x(t.claimed_speedup)})" if t.claimed_speedup is not None else ""
        lines.append(f"{t.task}: {t.origin}{claim}")
    return lines


def failed_final_lines(s: RunSummary) -> list[str]:
    """The faster variants each task did not keep because their final re-evaluation failed, e.g.
    ``L3_48: torch-compile-max-autotune: input set 3/5: output differs ...``."""
    return [f"{t.task}: {label}: {why}" for t in s.tasks for label, why in t.failed_finals]


def render_run_summary(s: RunSummary, width: int = 80) -> Group:
    parts: list[Table | Text] = [render_run_header(s), Text(""), to_rich(run_table(s), width)]
    if s.a_vs_a is not None:
        parts.append(to_rich(a_vs_a_table(s.a_vs_a), width))
    origins = origin_lines(s)
    if origins:
        parts.append(Text("origin of the kept kernels:", style="bold"))
        parts.extend(Text("  " + line, overflow="fold") for line in origins)
    dropped = failed_final_lines(s)
    if dropped:
        parts.append(Text("not kept, failed the final re-evaluation:", style="bold"))
        parts.extend(Text("  " + line, overflow="fold") for line in dropped)
    return Group(*parts)


def render_run_markdown(s: RunSummary) -> str:
    tokens = s.prompt_tokens + s.completion_tokens
    head = (
        f"run `{s.run_dir}` on {device_text(s)}; "
        f"{'complete' if s.complete else 'incomplete'}; {s.wall_s:.0f} s wall, "
        f"{s.gpu_seconds:.0f} s on the timing device; LLM {s.llm_calls} calls, {tokens:,} tokens, "
        f"${s.cost_usd:.2f}\n\n"
        f"throughput: {throughput_line(s)}; seconds: {parts_line(s)}\n\n"
        + (f"{a_vs_a_line(s.a_vs_a)}\n\n" if s.a_vs_a is not None else "")
    )
    origins = "".join(f"- {line}\n" for line in origin_lines(s))
    dropped = "".join(f"- {line}\n" for line in failed_final_lines(s))
    a_vs_a = "\n" + to_markdown(a_vs_a_table(s.a_vs_a)) if s.a_vs_a is not None else ""
    return (
        head
        + to_markdown(run_table(s))
        + ("\norigin of the kept kernels:\n\n" + origins if origins else "")
        + ("\nnot kept, failed the final re-evaluation:\n\n" + dropped if dropped else "")
        + a_vs_a
    )
