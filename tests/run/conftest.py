"""Fixtures for the run-directory tests."""

from __future__ import annotations

import pytest
from candidate_fixtures import GEMM_TASK

from cudal1.schema import Task


@pytest.fixture
def gemm_task() -> Task:
    return GEMM_TASK
