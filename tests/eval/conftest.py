from __future__ import annotations

import pytest

from cudal1.config import EvalConfig, SandboxConfig, TimingConfig
from cudal1.schema import Task

GEMM_RELU = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return torch.relu(self.lin(x))


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return [32]
"""


@pytest.fixture
def task() -> Task:
    return Task("gemm_relu", GEMM_RELU, level=1)


def candidate(forward_body: str, imports: str = "", init_extra: str = "") -> str:
    """A ModelNew with the reference's parameters and a custom forward body."""
    return f"""
import torch
import torch.nn as nn
{imports}

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)
{init_extra}
    def forward(self, x):
{forward_body}
"""


@pytest.fixture(name="candidate")
def candidate_fixture():
    return candidate


@pytest.fixture
def fast_config(tmp_path) -> EvalConfig:
    return EvalConfig(
        device="cpu",
        correctness_trials=5,
        build_cache=tmp_path / "builds",
        timing=TimingConfig(warmup_ms=2, min_samples=5, max_samples=12, budget_s=2, bootstrap_resamples=200),
        sandbox=SandboxConfig(call_timeout_s=8, first_calls_timeout_s=8, import_timeout_s=60),
    )
