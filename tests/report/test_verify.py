"""Statistics of a verify run: claims against measurements over the verified records."""

from __future__ import annotations

import pytest

from cudal1.report.verify import render_summary_markdown, summarize
from cudal1.schema import EvalResult, Stage, StageRecord
from cudal1.search.verify import Row


def test_summary_statistics() -> None:
    rows = [
        Row(0, 1, "a", "verified", claimed=2.0, measured=1.0, ci_low=0.9, ci_high=1.1),
        Row(1, 1, "b", "verified", claimed=4.0, measured=4.0, ci_low=3.8, ci_high=4.2),
        Row(2, 1, "c", "incorrect", claimed=9.0),
        Row(3, 1, "d", "no code"),
    ]
    s = summarize(rows)
    assert s.compared == 2 and s.within_ci == 1
    assert s.claimed["geomean"] == pytest.approx(8**0.5) and s.measured["median"] == pytest.approx(2.5)
    assert s.ratio_geomean == pytest.approx(0.5**0.5)
    assert s.counts["incorrect"] == 1 and s.counts["no code"] == 1


def test_summary_by_level_and_seconds_by_part() -> None:
    """Statuses and measured / claimed per level, as the paper reports by level; with the full
    results, the seconds the evaluations spent by part (build, first calls, correctness, timing)."""
    rows = [
        Row(0, 1, "L1_1", "verified", claimed=2.0, measured=1.0),
        Row(1, 1, "L1_2", "no code"),
        Row(2, 2, "L2_1", "verified", claimed=1.0, measured=1.5),
        Row(3, 2, "L2_2", "rejected", claimed=3.0),
        Row(4, 2, "L2_3", "not run", claimed=1.2),
    ]
    stages = (StageRecord(Stage.COMPILE, True, 10.0), StageRecord(Stage.CORRECTNESS, True, 4.0))
    result = EvalResult(task="L1_1", candidate_hash="", device="cuda:0", stages=stages)
    s = summarize(rows, {0: result, 2: result})
    assert list(s.levels) == [1, 2]
    one, two = s.levels[1], s.levels[2]
    assert (one.records, one.counts["verified"], one.counts["no code"]) == (2, 1, 1)
    assert (two.records, two.counts["rejected"], two.counts["not run"], two.compared) == (3, 1, 1, 1)
    assert one.ratio_geomean == pytest.approx(0.5) and two.ratio_geomean == pytest.approx(1.5)
    assert s.seconds == {"build": 20.0, "first calls": 0.0, "correctness": 8.0, "timing": 0.0}
    assert summarize(rows).seconds == {}  # rows alone (a report read back) carry no seconds
    md = render_summary_markdown(s)
    assert "| 2 | 3 | 1 | 1 | 0 | 0 | 0 | 0 | 0 | 1 | 1.500x |" in md
    assert "seconds by part, all records: build 20, first calls 0, correctness 8, timing 0" in md
