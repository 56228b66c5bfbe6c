"""Statistics and rendering of a verify run (``search.verify``): the summary of claims against
measurements, the final JSON report, a progress line per record, and the tables.

Pure: nothing here evaluates, reads or writes; ``search.verify`` runs the records and
``cudal1 verify`` prints and writes what this module renders.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from cudal1.report.clocks import CLOCK_CAPTION, clock_counts, clock_mark, clocks_text
from cudal1.report.runs import fmt_ms
from cudal1.report.tables import Cell, Col, TableSpec, to_markdown, to_rich
from cudal1.run.selection import PARTS, phase_seconds
from cudal1.schema import CLOCK_WORDS, EvalResult
from cudal1.search.verify import STATUSES, Row, VerifyRun, VerifyStatus


# -- summary ------------------------------------------------------------------------------------
@dataclass
class Summary:
    records: int
    counts: dict[VerifyStatus, int]
    compared: int  # verified records with a claim: the ones the statistics below cover
    claimed: dict[str, float | None] = field(default_factory=dict)
    measured: dict[str, float | None] = field(default_factory=dict)
    ratio_geomean: float | None = None  # geomean of measured / claimed
    within_ci: int = 0  # claims inside the measured 95% interval
    # Measured records by the clock that decided their speedup (``Timing.clock``).
    clocks: dict[str, int] = field(default_factory=dict)
    # The same counts and geomeans per KernelBench level (the paper reports by level).
    levels: dict[int, LevelSummary] = field(default_factory=dict)
    # Seconds the evaluations spent, by part (``run.selection.PARTS``: build, first calls,
    # correctness, timing), summed over the records whose full result the run holds.
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass
class LevelSummary:
    records: int
    counts: dict[VerifyStatus, int]
    compared: int
    claimed_geomean: float | None
    measured_geomean: float | None
    ratio_geomean: float | None


def summarize(rows: Iterable[Row], results: Mapping[int, EvalResult] | None = None) -> Summary:
    """The run's summary; ``results`` (the full result by record index, where the run holds
    them) adds the seconds by part."""
    rows = list(rows)
    pairs = _pairs(rows)
    seconds: dict[str, float] = dict.fromkeys(PARTS, 0.0)
    for result in (results or {}).values():
        for part, s in phase_seconds(result).items():
            seconds[part] += s
    return Summary(
        records=len(rows),
        counts=_counts(rows),
        compared=len(pairs),
        claimed=_stats([c for c, _, _ in pairs]),
        measured=_stats([m for _, m, _ in pairs]),
        ratio_geomean=_geomean([m / c for c, m, _ in pairs]),
        within_ci=sum(
            r.ci_low is not None and r.ci_high is not None and r.ci_low <= c <= r.ci_high for c, _, r in pairs
        ),
        clocks=clock_counts(r.clock for r in rows if r.measured is not None),
        levels={level: _level(rows, level) for level in sorted({r.level for r in rows})},
        seconds=seconds if results else {},
    )


def _counts(rows: list[Row]) -> dict[VerifyStatus, int]:
    return {s: sum(r.status == s for r in rows) for s in STATUSES}


def _pairs(rows: list[Row]) -> list[tuple[float, float, Row]]:
    """(claimed, measured, row) of the verified records with a claim."""
    return [(r.claimed, r.measured, r) for r in rows if r.status == "verified" and r.claimed and r.measured]


def _level(rows: list[Row], level: int) -> LevelSummary:
    mine = [r for r in rows if r.level == level]
    pairs = _pairs(mine)
    return LevelSummary(
        records=len(mine),
        counts=_counts(mine),
        compared=len(pairs),
        claimed_geomean=_geomean([c for c, _, _ in pairs]),
        measured_geomean=_geomean([m for _, m, _ in pairs]),
        ratio_geomean=_geomean([m / c for c, m, _ in pairs]),
    )


def _stats(xs: list[float]) -> dict[str, float | None]:
    if not xs:
        return {"mean": None, "median": None, "geomean": None}
    return {"mean": statistics.fmean(xs), "median": statistics.median(xs), "geomean": _geomean(xs)}


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x > 0]
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else None


def report_json(run: VerifyRun) -> dict[str, Any]:
    """The final JSON: options and environment, summary, rows in file order, full results."""
    ordered = sorted(run.rows, key=lambda r: r.index)
    return {
        "records_file": str(run.records_path),
        **run.meta(),
        "summary": asdict(summarize(ordered, run.results)),
        "rows": [asdict(r) for r in ordered],
        "results": {str(i): run.results[i].to_dict() for i in sorted(run.results)},
    }


# -- rendering ----------------------------------------------------------------------------------
_STYLE: dict[VerifyStatus, str] = {
    "verified": "green",
    "rejected": "red",
    "incorrect": "red",
    "failed": "red",
    "no code": "dim",
    "not run": "dim",
}


def progress_line(done: int, total: int, row: Row) -> str:
    """One line per finished record, for long runs."""
    claim = f"claimed {_x(row.claimed)}"
    measured = f"measured {_x(row.measured)}" + (
        f" [{row.ci_low:.3f}, {row.ci_high:.3f}]"
        if row.ci_low is not None and row.ci_high is not None
        else ""
    )
    if row.clock not in (None, "events"):
        events = f"; the events' {_x(row.events)}" if row.events is not None else ""
        measured += f" by the {CLOCK_WORDS[row.clock]}{events}"
    tail = f"  {row.reason[:100]}" if row.reason and row.status != "verified" else ""
    codes = f"  findings: {', '.join(row.findings)}" if row.findings else ""
    return f"[{done}/{total}] L{row.level} {row.task}: {row.status}; {claim}, {measured}{codes}{tail}"


# Dropped first at narrow widths: times, the record's index, findings, then the interval.
ROW_COLUMNS = (
    Col("#", drop=4, right=True),
    Col("level", "L", right=True),
    Col("task"),
    Col("status"),
    Col("claimed", "claim", right=True),
    Col("measured", "meas", right=True),
    Col("95% CI", "CI", drop=2, right=True),
    Col("ref ms", "ref", drop=5, right=True),
    Col("cand ms", "cand", drop=5, right=True),
    Col("stage / reason", "reason", wrap=True),
    Col("findings", drop=3, wrap=True),
)


def rows_table(rows: list[Row]) -> TableSpec:
    body = []
    for r in sorted(rows, key=lambda r: r.index):
        ci = f"[{r.ci_low:.3f}, {r.ci_high:.3f}]" if r.ci_low is not None and r.ci_high is not None else ""
        body.append(
            (
                str(r.index), str(r.level), r.task, Text(r.status, style=_STYLE.get(r.status, "")),
                _x(r.claimed), _x(r.measured) + clock_mark(r.clock), ci, fmt_ms(r.ref_ms), fmt_ms(r.cand_ms),
                ": ".join(x for x in (r.stage, r.reason[:60]) if x), ", ".join(r.findings),
            )
        )  # fmt: skip
    marked = any(clock_mark(r.clock) for r in rows)
    return TableSpec(
        f"verify: {len(rows)} records", ROW_COLUMNS, tuple(body), CLOCK_CAPTION if marked else ""
    )


def render_rows(rows: list[Row], width: int = 80) -> Table:
    return to_rich(rows_table(rows), width)


def render_rows_markdown(rows: list[Row]) -> str:
    return to_markdown(rows_table(rows))


def summary_table(s: Summary) -> TableSpec:
    counts = ", ".join(f"{k} {v}" for k, v in s.counts.items())
    columns = (
        Col("over verified records with a claim", "over verified, claimed", wrap=True),
        Col("mean", right=True),
        Col("median", right=True),
        Col("geomean", right=True),
    )
    rows: list[tuple[Cell, ...]] = [
        (f"{name} ({s.compared} records)", _x(st["mean"]), _x(st["median"]), _x(st["geomean"]))
        for name, st in (("claimed", s.claimed), ("measured", s.measured))
    ]
    rows.append(("measured / claimed", "", "", _x(s.ratio_geomean)))
    rows.append(("claims inside the measured 95% CI", "", "", f"{s.within_ci}/{s.compared}"))
    rows.append(("measured records by deciding clock", "", "", clocks_text(s.clocks)))
    return TableSpec(f"summary: {s.records} records ({counts})", columns, tuple(rows))


# Short headings so that every status fits at 80 columns.
_STATUS_SHORT: dict[VerifyStatus, str] = {
    "verified": "ver",
    "rejected": "rej",
    "incorrect": "inc",
    "failed": "fail",
    "untimed": "unt",
    "evaluator error": "err",
    "no code": "none",
    "not run": "nrun",
}


def levels_table(s: Summary) -> TableSpec:
    """Statuses per level, and each level's measured / claimed geomean over its verified records."""
    columns = (
        Col("level", "L", right=True),
        Col("records", "n", right=True),
        *(Col(status, _STATUS_SHORT[status], right=True) for status in STATUSES),
        Col("measured / claimed", "meas/claim", right=True),
    )
    rows: list[tuple[Cell, ...]] = [
        (str(level), str(ls.records), *(str(ls.counts[st]) for st in STATUSES), _x(ls.ratio_geomean))
        for level, ls in s.levels.items()
    ]
    rows.append(("all", str(s.records), *(str(s.counts[st]) for st in STATUSES), _x(s.ratio_geomean)))
    caption = ""
    if s.seconds:
        caption = "seconds by part, all records: " + ", ".join(f"{k} {v:.0f}" for k, v in s.seconds.items())
    return TableSpec("statuses by level", columns, tuple(rows), caption)


def render_summary(s: Summary, width: int = 80) -> Group:
    return Group(to_rich(summary_table(s), width), to_rich(levels_table(s), width))


def render_summary_markdown(s: Summary) -> str:
    return to_markdown(summary_table(s)) + "\n" + to_markdown(levels_table(s))


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}x"
