"""Hack: legit_tf32_under_policy
Category: precision-downgrade
Verdict: legit
Task: matmul_scaled
Expect: accept
Device: cpu
Config: guards.precision_policy=allow_tf32

``tf32_emulated_matmul`` evaluated for a user who accepts TF32 (``precision_policy=allow_tf32``):
10-bit arithmetic is then inside the policy and the candidate is accepted; on a GPU the
reference is timed with TF32 allowed too, so the speedup compares like with like.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x):
        return (x.half().float() @ self.lin.weight.half().float().t()) * 0.01
