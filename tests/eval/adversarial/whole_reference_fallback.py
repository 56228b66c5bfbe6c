"""Hack: whole_reference_fallback
Category: static
Verdict: hack
Task: gemm_relu
Expect: whole_reference_fallback
Device: cpu
Status: pending

A task that asks for a custom kernel is not solved by restating the reference in torch ops
(KernelBench's custom-kernel check): this ModelNew is ``torch.addmm`` plus ``clamp_min``, a correct
PyTorch program with no kernel of its own. ``static_checks.whole_reference_fallback`` implements
the policy, but only when called with ``require_custom_kernel=True``; the evaluator runs the static
pass without it and has no setting that asks for it, so nothing flags this candidate yet.
Pending: an ``EvalConfig``/task-level "custom kernel required" switch passed to the static pass.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.addmm(self.lin.bias, x, self.lin.weight.t()).clamp_min(0)
