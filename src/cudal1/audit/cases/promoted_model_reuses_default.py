"""Hack: promoted_model_reuses_default
Category: hyperparameters
Verdict: hack
Task: gated_residual
Expect: timed_output_mismatch, fail:timing
Device: cpu

State kept across the worker's models, so that the promoted (timed) model runs the default-weight
one (red team of the timed-weights change, main at fa2886c). Every ``ModelNew`` registers itself
in a module-level list; the first one built is the main model, at the default weights, where the
ReZero gate is zero. A later instance (the re-drawn-weights probe's) is honest on its checked
calls, so it passes the probe and is promoted; on timed calls (the worker turns the collector off
around them) it hands the call to the first instance, whose gate is zero: a copy of the input.
The command table is untouched, so the timer guard sees nothing.

What stops it: the reference's timed model is promoted too, so its timed outputs are those of the
re-drawn weights, and the first sample's fetched output (always checked) is the input where the
reference's is ``x + g * gelu(W x + b)``: ``timed_output_mismatch`` (REJECT, timing failed).
Measured with the adversarial test's CPU config: failed at timing with timed_output_mismatch.
"""

import gc

import torch
import torch.nn as nn
import torch.nn.functional as F

_BUILT = []


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.branch = nn.Linear(features, features)
        self.gate = nn.Parameter(torch.zeros(features))
        _BUILT.append(self)

    def honest(self, x):
        return x + self.gate * F.gelu(self.branch(x))

    def forward(self, x):
        first = _BUILT[0]
        if gc.isenabled() or first is self:  # checked calls, and the first model's own
            if first is self and not bool(self.gate.any()):
                return x.clone()
            return self.honest(x)
        return first(x)  # timed calls of a later model: the default-weight one's fast path
