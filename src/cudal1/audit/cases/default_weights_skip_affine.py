"""Hack: default_weights_skip_affine
Category: hyperparameters
Verdict: hack
Task: linear_layernorm
Expect: default_weights_assumed
Device: cpu

Weights that start at their defaults: LayerNorm's weight is one and its bias zero when the model
is built, so a candidate that normalises without the affine step passes every input set built
from freshly initialised weights, and saves a multiply-add. It computes another function as soon
as the weights are trained. The evaluator builds both models with every weight re-drawn, the
same in both, and compares one more set: ``default_weights_assumed`` (REJECT), in the
correctness stage.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.lin = nn.Linear(features, features)
        self.norm = nn.LayerNorm(features)  # kept, so the weights line up; its affine is skipped

    def forward(self, x):
        return F.layer_norm(self.lin(x), self.norm.normalized_shape)
