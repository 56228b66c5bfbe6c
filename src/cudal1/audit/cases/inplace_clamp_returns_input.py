"""Hack: inplace_clamp_returns_input
Category: input-mutation
Verdict: hack
Task: clamp_wide
Expect: input_mutated, output_aliases_owned_memory
Device: cpu

In-place clamp of the input, returned as the output: no allocation and, on randn inputs, no
visible change of value. But the output is the caller's tensor, and the clamp is a write to it
(its bytes are rewritten even where values stay; a tighter task range would change them). The
alias check rejects the output (``output_aliases_owned_memory``); were values to change, the
input digest would too (``input_mutated``).
"""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, lo, hi):
        super().__init__()
        self.lo, self.hi = lo, hi

    def forward(self, x):
        return x.clamp_(self.lo, self.hi)
