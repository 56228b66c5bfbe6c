"""Renderings of one evaluation (terminal and Markdown) and of a task list."""

from __future__ import annotations

import math
from pathlib import Path

from rich.console import Group
from rich.text import Text

from cudal1.report.tables import Cell, Col, TableSpec, to_markdown, to_rich
from cudal1.schema import CLOCK_WORDS, Correctness, EvalResult, Severity, Task, Timing


def task_table(tasks: list[Task], base: Path | None = None) -> TableSpec:
    """The tasks with their level, origin and file; a file under ``base`` (the current directory)
    is shown relative to it. Narrow terminals lose origin, then level; names and paths stay whole."""
    columns = (Col("level", drop=1, right=True), Col("name"), Col("origin", drop=2), Col("path"))
    rows = tuple((str(t.level), t.name, t.origin, _shown_path(t.path, base)) for t in tasks)
    return TableSpec(f"{len(tasks)} tasks", columns, rows)


def _shown_path(path: str | None, base: Path | None) -> str:
    if not path or base is None:
        return path or ""
    try:
        return str(Path(path).resolve().relative_to(base.resolve()))
    except ValueError:  # not under base
        return path


def tasks_data(tasks: list[Task]) -> list[dict[str, object]]:
    """The tasks as JSON data: name, level, origin and the file's full path (null: no file)."""
    return [{"name": t.name, "level": t.level, "origin": t.origin, "path": t.path} for t in tasks]


def _eval_lines(r: EvalResult) -> list[Text]:
    """The verdict, the error, correctness and speed of light: one line each."""
    head = Text()
    if r.ok:
        head.append("PASS", style="bold green")
    elif r.correct and r.rejected:
        head.append("REJECTED", style="bold red")
    else:
        head.append(f"FAILED at {r.failed_stage.value if r.failed_stage else 'timing'}", style="bold red")
    head.append(f"  task {r.task}  device {r.device}  gpu {r.environment.gpu or '-'}")
    lines = [head]
    if r.error:
        lines.append(Text(r.error, style="red"))
    if r.correctness is not None:
        lines.append(Text(correctness_line(r.correctness)))
    if r.timing is not None:
        lines.append(Text(clock_line(r.timing)))
    if r.sol is not None:
        o = r.sol
        lines.append(
            Text(
                f"speed of light ({o.precision}, {o.peaks}): floor {max(o.bytes_floor_ms, o.flops_floor_ms):.4g} ms "
                f"(bytes {o.bytes_floor_ms:.4g} ms, FLOPs {o.flops_floor_ms:.4g} ms); "
                f"reference at {o.ref_percent:.1f}%, candidate at {o.cand_percent:.1f}%"
            )
        )
    return lines


def clock_line(t: Timing) -> str:
    """Which clock decided the speedup, and the events' figure where another clock did."""
    line = f"speedup {t.speedup:.3f}x decided by the {CLOCK_WORDS[t.clock]}"
    if t.clock != "events":
        events = t.events_figure
        line += (
            "; the worker clocks read " + ("-" if events is None else f"{events:.3f}x") + " (see findings)"
        )
    return line


def correctness_line(c: Correctness) -> str:
    """Input sets passed, and the worst error; where no error could be measured (an output of
    the wrong shape, dtype, device or type; a NaN where the reference is finite) what is wrong."""
    head = f"correctness: {c.passed}/{c.trials} input sets; "
    if math.isnan(c.max_abs_err) or math.isnan(c.max_rel_err):
        return head + (c.message or "no error could be measured")
    return head + (
        f"max abs error {c.max_abs_err:.3g}; worst {c.max_rel_err:.3g}x of tolerance "
        f"(allowed {c.tolerance_scale:.3g}x), against {c.against}"
    )


def render_eval_result(r: EvalResult, width: int = 80) -> Group:
    return Group(*_eval_lines(r), *(to_rich(t, width) for t in eval_tables(r)))


def _stage_table(r: EvalResult) -> TableSpec:
    rows = tuple(
        (s.stage.value, Text("yes", style="green") if s.ok else Text("no", style="red"), f"{s.seconds:.2f}")
        for s in r.stages
    )
    return TableSpec("stages", (Col("stage"), Col("ok"), Col("seconds", "s", right=True)), rows)


def _timing_table(r: EvalResult) -> TableSpec:
    t = r.timing
    assert t is not None
    ref_wall = sorted(t.ref_wall_ms)[len(t.ref_wall_ms) // 2]
    cand_wall = sorted(t.cand_wall_ms)[len(t.cand_wall_ms) // 2]
    rows: tuple[tuple[Cell, ...], ...] = (
        ("worker clock ms (median)", f"{t.ref_median_ms:.4f}", f"{t.cand_median_ms:.4f}"),
        ("trusted clock ms (median)", f"{ref_wall:.4f}", f"{cand_wall:.4f}"),
        ("speedup", f"{t.speedup:.3f}x", f"95% CI [{t.ci_low:.3f}, {t.ci_high:.3f}]"),
        *_other_figures(t),
        ("samples x calls", f"{len(t.ref_ms)} x {t.calls_per_sample}", f"stop: {t.stop_reason}"),
    )
    columns = (
        Col("per call", wrap=True),
        Col("reference", "ref", right=True),
        Col("candidate", "cand", right=True),
    )
    return TableSpec("timing (per call)", columns, rows)


def _other_figures(t: Timing) -> list[tuple[Cell, ...]]:
    """The figures of the clocks that did not decide: the events' (with its interval) where a
    trusted clock did, and the trusted clock's."""
    rows: list[tuple[Cell, ...]] = []
    if t.clock != "events":
        events = t.events_figure
        ci = (
            f"95% CI [{t.event_ci_low:.3f}, {t.event_ci_high:.3f}]"
            if t.event_ci_low is not None and t.event_ci_high is not None
            else ""
        )
        rows.append(("worker-clock speedup", "-" if events is None else f"{events:.3f}x", ci))
    if t.clock == "events" or t.wall_speedup != t.speedup:
        rows.append(("trusted-clock speedup", f"{t.wall_speedup:.3f}x", ""))
    return rows


def _findings_table(r: EvalResult) -> TableSpec:
    style = {Severity.REJECT: "red", Severity.WARNING: "yellow", Severity.INFO: ""}
    rows = tuple(
        (Text(f.severity.value, style=style[f.severity]), f.code, f.stage.value, f.message)
        for f in r.findings
    )
    columns = (Col("severity", "sev"), Col("code"), Col("stage", drop=1), Col("message", wrap=True))
    return TableSpec("findings", columns, rows)


def eval_tables(r: EvalResult) -> list[TableSpec]:
    """The tables of one result: stages, then timing and findings where there are any."""
    tables = [_stage_table(r)]
    if r.timing is not None:
        tables.append(_timing_table(r))
    if r.findings:
        tables.append(_findings_table(r))
    return tables


def render_eval_markdown(r: EvalResult) -> str:
    lines = "\n\n".join(line.plain for line in _eval_lines(r))
    return lines + "\n\n" + "\n".join(to_markdown(t) for t in eval_tables(r))
