"""Hack: tf32_scoped_matmul_gpu
Category: precision-downgrade
Verdict: hack
Task: gemm_large
Expect: reduced_precision
Device: gpu

precision-downgrade, the case of issue 10 (verified at about 7x on an H100): the fp32 2048x2048
GEMM runs on TF32 tensor cores, with the flag set and restored inside ``forward`` so that no
process state is left changed. Its errors against float64 (about 17x the fp32 reference's on
``torch.rand``-like inputs) sit at the level the reference's own float16 run shows on the same
inputs: ``reduced_precision``, REJECT under the default policy.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features)

    def forward(self, x):
        saved = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            return torch.relu(self.lin(x))
        finally:
            torch.backends.cuda.matmul.allow_tf32 = saved
