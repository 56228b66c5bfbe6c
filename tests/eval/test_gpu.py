"""GPU-only evaluator tests: real CUDA and Triton kernels, and a kernel that faults.

Run on the device with ``pytest -m gpu`` (scripts/gpu-check.sh); skipped without CUDA.
"""

from __future__ import annotations

import pytest
from candidate_fixtures import SCALE_SHIFT, SCALE_SHIFT_TASK

from cudal1.config import EvalConfig, SandboxConfig, TimingConfig
from cudal1.eval.pool import EvalPool
from cudal1.schema import EvalRequest, Stage

pytestmark = pytest.mark.gpu

CUDA_KERNEL = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = """
__global__ void scale_shift_relu(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i] * 2.0f + 1.0f; y[i] = v > 0.f ? v : 0.f; }
}
torch::Tensor run(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    scale_shift_relu<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
cpp_src = "torch::Tensor run(torch::Tensor x);"
ext = load_inline("scale_shift_relu_BAD", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["run"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.run(x.contiguous())
'''

BAD_KERNEL = CUDA_KERNEL.replace("long i = blockIdx.x", "long i = 1000000000L + blockIdx.x").replace(
    "if (i < n)", "if (true)"
)

TRITON_KERNEL = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_shift_relu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.maximum(x * 2.0 + 1.0, 0.0)
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        scale_shift_relu[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
"""


@pytest.fixture
def gpu_config(tmp_path) -> EvalConfig:
    return EvalConfig(
        device="cuda",
        build_cache=tmp_path / "builds",
        timing=TimingConfig(budget_s=3),
        sandbox=SandboxConfig(call_timeout_s=120, import_timeout_s=600),
    )


def test_load_inline_cuda_kernel_is_correct_and_timed(gpu_config):
    with EvalPool(gpu_config, workers=1, spares=0) as pool:
        result = pool.evaluate(SCALE_SHIFT_TASK, CUDA_KERNEL.replace("_BAD", "_ok"))
    assert result.failed_stage is None, result.error
    assert result.correct and result.timing is not None
    assert result.environment.arch is not None
    assert 0.2 < result.timing.speedup < 20


def test_triton_kernel_is_correct_and_timed(gpu_config):
    with EvalPool(gpu_config, workers=1, spares=0) as pool:
        result = pool.evaluate(SCALE_SHIFT_TASK, TRITON_KERNEL)
    assert result.failed_stage is None, result.error
    assert result.ok


def test_illegal_memory_access_fails_alone(gpu_config):
    requests = [
        EvalRequest(SCALE_SHIFT_TASK, BAD_KERNEL.replace("_BAD", "_bad"), "bad"),
        EvalRequest(SCALE_SHIFT_TASK, TRITON_KERNEL, "good"),
        EvalRequest(SCALE_SHIFT_TASK, SCALE_SHIFT.replace("class Model(", "class ModelNew("), "same"),
    ]
    with EvalPool(gpu_config, workers=2, spares=1) as pool:
        results = {req.request_id: res for req, res in pool.evaluate_many(requests)}
    bad = results["bad"]
    assert bad.failed_stage in (Stage.LOAD, Stage.CORRECTNESS)
    assert "illegal" in bad.error.lower() or "died" in bad.error.lower() or "cuda" in bad.error.lower()
    assert results["good"].ok, results["good"].error
    assert results["same"].ok, results["same"].error


def test_reference_against_itself_brackets_one(gpu_config):
    with EvalPool(gpu_config, workers=1, spares=0) as pool:
        result = pool.evaluate(SCALE_SHIFT_TASK, SCALE_SHIFT.replace("class Model(", "class ModelNew("))
    assert result.ok, result.error
    assert result.timing.ci_low < 1.03 and result.timing.ci_high > 0.97
    # The reference's kernels were counted (its ATen operators) and the floor is at least the base.
    facts = result.environment.reproducibility
    assert facts["reference_launches"] >= 1, facts
    cfg = gpu_config.timing
    assert facts["floor"] >= min(cfg.reproducibility_floor, cfg.reproducibility_floor_short) * 0.999, facts
