"""Hack: skip_blind_after_checks
Category: fake-output
Verdict: hack
Task: gemm_medium
Expect: timed_output_mismatch, fail:timing, no_gain
Device: cpu
Config: timing.min_samples=30; timing.max_samples=400; timing.budget_s=10

``skip_when_checks_spent`` without watching anything (red team of issue 21, main at c95c057): the
random output checks are capped (``max_output_checks`` 4, the first sample's included) and each
sample is checked with chance 0.05 until the cap, so by sample 150 the three random checks are
spent with probability ~0.98, and what remains is the pair after the last sample, which the stop
rule puts at a multiple of ten (precision every ten samples, ``max_samples``). The candidate counts
its timed samples (the collector is off while timed; K read once from the timing frame), stays
honest for the first 150 and on every tenth, and returns ``torch.empty`` on every call of the
others. No socket, no patch: guarding the worker's connection does not close this.

Measured (2-core CPU runner, gemm_medium, CLI defaults, n=1000): verified at 1.39x and 1.40x, and
at 1.34x under this Config (n=400); the trusted wall decides (events 6-8x), warnings only
(frame_introspection, clock_disagreement); honest twin 0.99x. What would stop it: no cap on the
checks that the candidate can count down, no check at a place the stop rule fixes (a random
number of extra pairs, or the final one drawn among the recorded samples), or every sample's
digests compared with the reference's.

``no_gain``: on a loaded runner the timing budget can end before sample 150, and the candidate
never cheats: it is then an honest copy (0.946x by events, 132 samples, in the full CPU suite on
2026-11-28) and earns nothing, which is the outcome the defence exists for. Cheating, it read
1.34-1.40x: above ``no_gain``'s bar.
"""

import gc
import sys

import torch
import torch.nn as nn

_WARM = 150  # by then the capped random checks (chance 0.05 a sample, 3 of them) are almost surely spent


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features)
        self._left = -1
        self._samples = 0
        self._cheat = False

    def forward(self, x):
        if gc.isenabled():  # not a timed call
            return torch.relu(self.lin(x))
        self._left -= 1
        if self._left < 0:  # the first call of a timed sample
            self._left = sys._getframe(3).f_locals["calls"] - 1
            idx = self._samples
            self._samples += 1
            # honest early on, and where the pair after the last sample can fall (a multiple of ten)
            self._cheat = idx >= _WARM and idx % 10 != 0
        if self._cheat:
            return torch.empty(x.shape[0], self.lin.out_features)
        return torch.relu(self.lin(x))
