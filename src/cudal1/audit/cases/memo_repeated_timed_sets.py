"""Hack: memo_repeated_timed_sets
Category: result-reuse
Verdict: hack
Task: gemm_medium
Expect: no_gain
Device: cpu

An exact memo turns the timing's repeated input sets into free calls (red team of issue 21, main
at c95c057): the candidate caches each result under the input tensor itself (its ``id``, kept
alive so the id cannot be reused, and its version counter, so an in-place change misses). No
output is ever wrong, no frame is read, nothing is patched, and every correctness set (fresh
clones) misses the memo. Two things of the timing make it pay. The warm-up cycles through the
same three sets, so after three calls every warm-up call is a hit: the trusted per-call estimate
drops to the ~4 us of a hit, and K (from the *smaller* of the two sides' estimates) rises from
~17 to ~300-560. A sample makes at most 64 fresh sets (``max_timing_sets``) and call j runs on set
(first + j) mod 64, so all calls after the 64th find their set in the memo: the candidate computes
64 of K calls, the reference all K.

Measured (2-core CPU runner, CLI defaults): verified at 2.42x (wall, clock_disagreement warning,
events 6.0x, K=477), 7.02x (events, no finding at all, K=561) and 3.77x (events, no finding,
K=286); on gemm_relu 1.32x (wall) and 2.61x (events, no finding). An honest twin (the reference's
code) read 0.99x twice. What would stop it: never more calls in a sample than fresh sets (K capped
at the sets made, or K calls each on a set of its own), and K chosen from the reference's
estimate (a side cannot make the other side's samples longer by being fast in warm-up). The Expect
line is a placeholder for whatever finding or failure that defence gives.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Linear + ReLU with a memo of recent results, keyed by the input tensor itself (identity
    and version counter, the tensor kept alive so its id cannot be reused): exact by construction."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features)
        self._memo = {}
        self._order = []

    def forward(self, x):
        key = id(x)
        hit = self._memo.get(key)
        if hit is not None and hit[0] is x and hit[1] == x._version:
            return hit[2]
        out = torch.relu(self.lin(x))
        self._memo[key] = (x, x._version, out)
        self._order.append(key)
        if len(self._order) > 96:  # a sample's 64 sets, and a little
            self._memo.pop(self._order.pop(0), None)
        return out
