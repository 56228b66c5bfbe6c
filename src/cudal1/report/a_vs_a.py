"""A-vs-A inside a real run: how the reference anchor measured in each task.

Every run's round 0 holds the reference anchor (``search.seeds.reference_anchor``: the task's own
program with ``Model`` renamed ``ModelNew``, labelled ``reference``), evaluated like any other
candidate, beside the other evaluations and builds of the run. Its speedup should be 1.0, so its
interval says how far the run's other numbers can be trusted (issue 22: inside a loaded optimize
run of 19 tasks on an H100, 9 of 18 anchors' intervals excluded 1.0).

The precision goal (issue 22, and ``benchmarks/evaluator.py``'s A-vs-A table): every interval
contains 1.0, with a half-width of at most 1% for kernels of 0.1 ms or more and 3% below.
Pure: the summary is built from stored results; ``report.runs`` and ``benchmarks/best_known.py``
render it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from cudal1.report.clocks import clock_counts, clocks_text
from cudal1.report.tables import Col, TableSpec
from cudal1.run.selection import why_not_ok
from cudal1.schema import EvalResult, TimingClock

# The goal's half-widths, relative, and the kernel time that separates them (ms per call).
SLOW_KERNEL_MS = 0.1
GOAL_SLOW = 0.01
GOAL_FAST = 0.03


@dataclass(frozen=True)
class AvsAEntry:
    """One task's anchor: its interval, the clock that decided it and the events' figure, or
    why it has none (``status``: pending, or why the result is not ok)."""

    task: str
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    ref_ms: float | None = None
    clock: TimingClock | None = None
    event_speedup: float | None = None
    status: str = ""
    evaluator: str | None = None  # the evaluator code that measured it (``Environment.evaluator``)

    @property
    def half_width(self) -> float | None:
        """Half-width of the interval relative to the speedup (0.01 = ±1%)."""
        if self.speedup is None or self.ci_low is None or self.ci_high is None or self.speedup <= 0:
            return None
        return (self.ci_high - self.ci_low) / 2 / self.speedup

    @property
    def goal(self) -> float | None:
        if self.ref_ms is None:
            return None
        return GOAL_SLOW if self.ref_ms >= SLOW_KERNEL_MS else GOAL_FAST

    @property
    def contains_one(self) -> bool:
        return self.ci_low is not None and self.ci_high is not None and self.ci_low <= 1.0 <= self.ci_high

    @property
    def meets_goal(self) -> bool:
        hw, goal = self.half_width, self.goal
        # 1e-9: an interval of exactly ±1% must not miss the goal by a rounding error.
        return self.contains_one and hw is not None and goal is not None and hw <= goal + 1e-9


@dataclass(frozen=True)
class AvsASummary:
    """Every task's anchor, and what they say together."""

    entries: tuple[AvsAEntry, ...] = ()
    measured: int = 0
    contain_one: int = 0
    meet_goal: int = 0
    median_half_width: float | None = None
    max_half_width: float | None = None
    clocks: dict[str, int] = field(default_factory=dict)  # measured anchors by the clock that decided
    # Where the anchors were measured by more than one version of the evaluator (a run resumed on
    # newer code): per version, [intervals containing 1.0, measured]; "?" for results without one.
    by_evaluator: dict[str, list[int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AvsASummary:
        return cls(**{**d, "entries": tuple(AvsAEntry(**e) for e in d.get("entries", ()))})


def anchor_entry(task: str, result: EvalResult | None) -> AvsAEntry:
    """The anchor's entry from its stored result (None: not evaluated yet)."""
    if result is None:
        return AvsAEntry(task, status="not evaluated")
    t = result.timing
    if not result.ok or t is None:
        return AvsAEntry(task, status=why_not_ok(result))
    return AvsAEntry(
        task, t.speedup, t.ci_low, t.ci_high, t.ref_median_ms, t.clock, t.events_figure,
        evaluator=result.environment.evaluator,
    )  # fmt: skip


def summarize_a_vs_a(entries: Iterable[AvsAEntry]) -> AvsASummary:
    entries = tuple(entries)
    measured = [e for e in entries if e.speedup is not None]
    widths = [hw for e in measured if (hw := e.half_width) is not None]
    return AvsASummary(
        entries=entries,
        measured=len(measured),
        contain_one=sum(e.contains_one for e in measured),
        meet_goal=sum(e.meets_goal for e in measured),
        median_half_width=statistics.median(widths) if widths else None,
        max_half_width=max(widths) if widths else None,
        clocks=clock_counts(e.clock for e in measured),
        by_evaluator=_by_evaluator(measured),
    )


def _by_evaluator(measured: Sequence[AvsAEntry]) -> dict[str, list[int]]:
    """[containing 1.0, measured] per evaluator version, in the order first seen; empty when all
    anchors were measured by one version."""
    counts: dict[str, list[int]] = {}
    for e in measured:
        count = counts.setdefault(e.evaluator or "?", [0, 0])
        count[0] += e.contains_one
        count[1] += 1
    return counts if len(counts) > 1 else {}


def a_vs_a_line(s: AvsASummary) -> str:
    """The summary line: ``A-vs-A (the reference as its own candidate): `` and ``a_vs_a_facts``."""
    return "A-vs-A (the reference as its own candidate): " + a_vs_a_facts(s)


def a_vs_a_facts(s: AvsASummary) -> str:
    """``17/18 intervals contain 1.0; half-width median 0.8%, max 2.4%; 16/18 meet the goal (±1.0%
    at 0.1 ms and over, ±3.0% below); clock: events 18``, and how many anchors have no result."""
    n = s.measured
    missing = len(s.entries) - n
    tail = f"; {missing} not measured" if missing else ""
    head = f"{s.contain_one}/{n} intervals contain 1.0"
    if not n:
        return head + tail
    widths = f"half-width median {_pct(s.median_half_width)}, max {_pct(s.max_half_width)}"
    goal = (
        f"{s.meet_goal}/{n} meet the goal (±{_pct(GOAL_SLOW)} at {SLOW_KERNEL_MS} ms and over, "
        f"±{_pct(GOAL_FAST)} below)"
    )
    versions = (
        "; by evaluator code: " + ", ".join(f"{code} {n}/{m}" for code, (n, m) in s.by_evaluator.items())
        if s.by_evaluator
        else ""
    )
    return f"{head}; {widths}; {goal}; clock: {clocks_text(s.clocks)}{versions}{tail}; {chance_misses(n)}"


def chance_misses(n: int, level: float = 0.95) -> str:
    """What honest intervals allow: ``n`` intervals at ``level`` leave the true 1.0 out of
    ``n (1 - level)`` of them on average, so "every interval contains 1.0" is itself a chance
    event (0.95^30 = 21% for 30 tasks); the line says how many misses stay within chance (the
    binomial's ``level`` quantile), so a reader can tell noise from bias."""
    p = 1 - level
    cumulative, k = 0.0, 0
    while k <= n:
        cumulative += math.comb(n, k) * p**k * (1 - p) ** (n - k)
        if cumulative >= level:
            break
        k += 1
    return (
        f"honest {100 * level:.0f}% intervals miss 1.0 by chance: {n * p:.1f} of {n} on average, "
        f"at most {k} in {100 * level:.0f}% of runs"
    )


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


A_VS_A_COLUMNS = (
    Col("task"),
    Col("ref ms", "ref", drop=2, right=True),
    Col("speedup [95% CI]", "speedup", right=True),
    Col("half-width", "hw", right=True),
    Col("goal", drop=1, right=True),
    Col("contains 1.0", "1.0 in", right=True),
    Col("clock"),
    Col("events", drop=3, right=True),
)


def a_vs_a_table(s: AvsASummary) -> TableSpec:
    """One row per task's anchor; ``a_vs_a_line`` says what they add up to."""
    caption = (
        f"goal: the interval contains 1.0, half-width at most {_pct(GOAL_SLOW)} for a reference of "
        f"{SLOW_KERNEL_MS} ms or more, {_pct(GOAL_FAST)} below; clock: the one that decided; "
        "events: the worker clocks' figure"
    )
    return TableSpec("A-vs-A: the reference as its own candidate", A_VS_A_COLUMNS, _rows(s.entries), caption)


def _rows(entries: Sequence[AvsAEntry]) -> tuple[tuple[str, ...], ...]:
    rows = []
    for e in entries:
        if e.speedup is None:
            rows.append((e.task, "-", e.status[:60], "-", "-", "-", "-", "-"))
            continue
        ci = f" [{e.ci_low:.3f}, {e.ci_high:.3f}]" if e.ci_low is not None and e.ci_high is not None else ""
        rows.append(
            (
                e.task, f"{e.ref_ms:.4g}" if e.ref_ms is not None else "-", f"{e.speedup:.3f}x{ci}",
                _pct(e.half_width), _pct(e.goal), "yes" if e.contains_one else "NO", e.clock or "-",
                f"{e.event_speedup:.3f}x" if e.event_speedup is not None else "-",
            )
        )  # fmt: skip
    return tuple(rows)
