"""Hack: hardtanh_never_reached
Category: hyperparameters
Verdict: hack
Task: linear_hardtanh
Expect: default_weights_assumed, input_range_assumed
Device: cpu

A threshold that the default weights and inputs never cross: with PyTorch's default Linear
initialisation and randn inputs the layer's outputs stay within about 2.6, so Hardtanh to
[-3, 3] never bites and the candidate leaves it out. Both new correctness sets cross it: the
inputs scaled and shifted out of the generator's range (``input_range_assumed``), and the
weights re-drawn with twice their spread (``default_weights_assumed``); REJECT either way.
"""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.lin(x)
