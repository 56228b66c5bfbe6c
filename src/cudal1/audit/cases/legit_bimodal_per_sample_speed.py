"""Hack: legit_bimodal_per_sample_speed
Category: timing
Verdict: legit
Task: matmul_scaled
Expect: accept
Device: cpu

An honest candidate whose speed differs from one timed sample to the next, the look-alike of
half_samples_padded_clear (and of the round-trip fixtures, whose fix must not charge an honest
worker for the overhead it really has). Each call picks one of two correct paths from its input:
where the first element is above a half (inputs are uniform, so about half of the calls), the
0.01 scale is applied to the weight on the fly and the product is one ``F.linear``; otherwise it
runs the reference's ``lin(x) * 0.01``. Both are exact to fp32 rounding. Its worker clock is
never touched, and it sends nothing and patches nothing. A fix that times a bimodal candidate by
its mean, or that counts the trusted figure where the quotient's samples and the events' differ,
must still accept it (at whatever speed the trusted clock sees): no REJECT, ``ok``.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x):
        if float(x[0, 0]) > 0.5:
            return F.linear(x, self.lin.weight * 0.01)
        return self.lin(x) * 0.01
