"""Statistics of a verify run: claims against measurements over the verified records."""

from __future__ import annotations

import pytest

from cudal1.report.verify import summarize
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
