"""Which records a verify run takes: level and name filters, a seeded sample, a limit."""

from __future__ import annotations

import pytest

from cudal1.schema import Candidate, Task
from cudal1.search.verify import Selection, select_records
from cudal1.tasks import TaskError


def test_selection_levels_sample_limit() -> None:
    records = [(Task(f"t{i}", "", level=1 + i % 3), Candidate(f"t{i}", "src")) for i in range(30)]
    picked = select_records(records, Selection(levels=frozenset({1, 2}), sample=8, seed=3))
    assert len(picked) == 8 and all(t.level in (1, 2) for _, t, _ in picked)
    assert [i for i, _, _ in picked] == sorted(i for i, _, _ in picked)
    assert picked == select_records(records, Selection(levels=frozenset({1, 2}), sample=8, seed=3))
    assert [i for i, _, _ in select_records(records, Selection(limit=3))] == [0, 1, 2]
    named = select_records(records, Selection(names=frozenset({records[4][0].name, records[1][0].name})))
    assert [i for i, _, _ in named] == [1, 4]
    with pytest.raises(TaskError, match="no record named nope"):
        select_records(records, Selection(names=frozenset({"nope"})))


def test_the_parts_of_a_selection_cover_it_once() -> None:
    records = [(Task(f"t{i}", "", level=1 + i % 3), Candidate(f"t{i}", "src")) for i in range(11)]
    whole = select_records(records, Selection(levels=frozenset({1, 2})))
    parts = [select_records(records, Selection(levels=frozenset({1, 2}), shard=(k, 3))) for k in (1, 2, 3)]
    assert all(parts) and sorted(i for part in parts for i, _, _ in part) == [i for i, _, _ in whole]
    assert {len(p) for p in parts} <= {len(whole) // 3, len(whole) // 3 + 1}
