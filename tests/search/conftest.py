"""Fixtures for the search tests."""

from __future__ import annotations

import pytest
from search_fixtures import GEMM_TASK

from cudal1.schema import Task


@pytest.fixture
def gemm_task() -> Task:
    return GEMM_TASK
