"""Hack: zero_gate_skipped
Category: hyperparameters
Verdict: hack
Task: gated_residual
Expect: default_weights_unmapped, default_weights_assumed
Device: cpu

Right only in the initialisation regime (issue 21: verified at about 46x and 52x on an H100): the
reference's residual branch sits behind a gate that starts at zero, so at initialisation the
output is the input. The candidate builds the branch's Linear (its weights still match the
reference's), has no gate, and skips the branch. The evaluator used to re-draw only parameters
it could find by the reference's name and shape, and said no more than a warning when it could
not. Now both models are built with every weight re-drawn (the gate, found by size and kind, not
by name), and the candidate's output no longer follows: ``default_weights_unmapped`` (REJECT,
the gate has no counterpart), in the correctness stage.
"""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.branch = nn.Linear(features, features)

    def forward(self, x):
        return x.clone()
