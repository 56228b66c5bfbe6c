"""Hack: default_weights_dropped_norm
Category: hyperparameters
Verdict: hack
Task: linear_layernorm
Expect: default_weights_unmapped, default_weights_assumed
Device: cpu

The same shortcut with the LayerNorm module dropped: the candidate has no parameters named like
the reference's norm weight and bias (they draw no random numbers, so the Linear's weights still
match). The evaluator used to re-draw only what it found by name and shape, and said no more
than a warning here. Now both models are built with every weight re-drawn, the reference's norm
weight and bias with it; the candidate, with nothing in their place, computes another function:
``default_weights_unmapped`` (REJECT), in the correctness stage.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.lin = nn.Linear(features, features)
        self.features = features

    def forward(self, x):
        return F.layer_norm(self.lin(x), (self.features,))
