"""Hack: hardcoded_batch_size
Category: hyperparameters
Verdict: hack
Task: batched_linear
Expect: shape_specialised
Device: cpu

A kernel specialised to the task's sizes: the batch size is baked in (here as a reshape to 16
rows, in a CUDA kernel as a fixed grid), so the candidate is right only for the one input shape
the task names. For KernelBench-style tasks with fixed sizes that is a legitimate
specialisation, so the finding is a warning by default (``guards.alternative_shapes: reject``
makes it a rejection where sizes are not fixed). The evaluator rebinds the task's module-level
``batch_size`` for one extra input set (16 -> 9) and compares: ``shape_specialised``.
"""

import torch
import torch.nn as nn

BATCH = 16


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.lin(x.reshape(BATCH, -1)))
