"""``--shard K/N`` (tests/conftest.py): the GPU tests run in parts, one per device call."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOME = "tests/benchmarks/test_best_known.py"


def _collected(*args: str) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", SOME, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return done.returncode, [line for line in done.stdout.splitlines() if "::" in line]


def test_the_parts_cover_every_test_once():
    _, every = _collected()
    _, first = _collected("--shard", "1/2")
    _, second = _collected("--shard", "2/2")
    assert len(every) > 2 and first and second
    assert sorted(first + second) == sorted(every) and not set(first) & set(second)


def test_a_part_that_does_not_exist_is_a_usage_error():
    rc, items = _collected("--shard", "3/2")
    assert rc == 4 and not items
