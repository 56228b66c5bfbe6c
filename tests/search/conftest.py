"""Fixtures for the search tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from candidate_fixtures import GEMM_TASK
from run_fixtures import closed_port_url, no_real_endpoint  # noqa: F401 (fixtures)

from cudal1.run.database import CandidateDB
from cudal1.schema import Task


@pytest.fixture
def gemm_task() -> Task:
    return GEMM_TASK


@pytest.fixture
def open_db() -> Iterator[Any]:
    opened: list[CandidateDB] = []

    def _open(run: Path) -> CandidateDB:
        opened.append(CandidateDB(run / "candidates.db"))
        return opened[-1]

    yield _open
    for db in opened:
        db.close()
