"""Hack: whole_reference_fallback
Category: static
Verdict: hack
Task: gemm_relu
Expect: whole_reference_fallback
Device: cpu
Config: guards.require_custom_kernel=true

A task that asks for a custom kernel is not solved by restating the reference in torch ops
(KernelBench's custom-kernel check): this ModelNew is ``torch.addmm`` plus ``clamp_min``, a correct
PyTorch program with no kernel of its own. With ``guards.require_custom_kernel`` on, the static
rule ``whole_reference_fallback`` (a policy rule) rejects it before it runs; without that
setting the same program is a legitimate rewrite and earns what it measures.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.addmm(self.lin.bias, x, self.lin.weight.t()).clamp_min(0)
