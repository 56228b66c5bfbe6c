"""The precision policy (eval/checks/precision.py) without workers: where TF32-level errors are
the task's own precision."""

from __future__ import annotations

from cudal1.eval.checks.precision import precision_finding, reference_may_use_tf32


def test_tf32_level_errors_are_the_task_precision_for_conv_references_on_cuda():
    conv_task = "import torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.c = nn.Conv2d(3, 8, 3)\n"
    gemm_task = (
        "import torch\nclass Model:\n    def forward(self, a, b):\n        return torch.matmul(a, b)\n"
    )
    assert reference_may_use_tf32(conv_task, "cuda")
    assert not reference_may_use_tf32(conv_task, "cpu")
    assert not reference_may_use_tf32(gemm_task, "cuda")
    tf32_like = 3000.0  # errors ~2^-13 relative in an fp32 task
    assert precision_finding(tf32_like, "float32", "task") is not None
    assert precision_finding(tf32_like, "float32", "task", tf32_default=True) is None
    assert precision_finding(2.0**16, "float32", "task", tf32_default=True) is not None  # bf16-like
