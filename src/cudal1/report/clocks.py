"""How reports name the clock that decided a speedup (``schema.Timing.clock``): a mark beside a
speedup that a trusted clock decided rather than the events, the caption that explains it, and
counts of speedups by clock. Shared by the run summary, the verify tables and the A-vs-A table.
"""

from __future__ import annotations

from collections.abc import Iterable

from cudal1.schema import TIMING_CLOCKS, TimingClock

# A speedup that a trusted clock decided rather than the events (``Timing.clock``) is marked, and
# the table's caption says what the mark means.
OTHER_CLOCK_MARK = "*"
CLOCK_CAPTION = (
    f"{OTHER_CLOCK_MARK}: decided by the trusted clock, not the events "
    "(a clock_disagreement finding names both figures)"
)


def clock_mark(clock: TimingClock | None) -> str:
    return OTHER_CLOCK_MARK if clock not in (None, "events") else ""


def clock_counts(clocks: Iterable[TimingClock | None]) -> dict[str, int]:
    """How many speedups each clock decided, in ``TIMING_CLOCKS`` order (unrecorded ones left out)."""
    seen = [c for c in clocks if c is not None]
    return {c: seen.count(c) for c in TIMING_CLOCKS if c in seen}


def clocks_text(counts: dict[str, int]) -> str:
    """``events 17, launch_wall 1``; "-" when nothing was measured."""
    return ", ".join(f"{c} {n}" for c, n in counts.items()) or "-"
