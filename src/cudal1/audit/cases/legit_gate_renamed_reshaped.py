"""Hack: legit_gate_renamed_reshaped
Category: hyperparameters
Verdict: legit
Task: gated_residual
Expect: accept
Device: cpu

Look-alike of zero_gate_skipped: the candidate keeps the gated branch, but its gate has another
name and shape (``alpha``, ``[1, features]`` for the reference's ``gate``, ``[features]``) and
the branch's weight is stored transposed under a name of its own, for one ``addmm`` and one
``addcmul``. The re-drawn weights reach it by size and kind and through construction (the
transposed copy is taken from the re-drawn Linear), so it stays right on them.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        lin = nn.Linear(features, features)
        self.weight_t = nn.Parameter(lin.weight.detach().t().contiguous())
        self.bias = nn.Parameter(lin.bias.detach().clone())
        self.alpha = nn.Parameter(torch.zeros(1, features))

    def forward(self, x):
        return torch.addcmul(x, self.alpha, F.gelu(torch.addmm(self.bias, x, self.weight_t)))
