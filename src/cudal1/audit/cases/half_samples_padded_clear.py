"""Hack: half_samples_padded_clear
Category: timing
Verdict: hack
Task: matmul_scaled
Expect: clock_disagreement, timer_tampered, no_gain
Device: cpu
Status: pending

The clock quotient's own rule turned into a lever: on a CPU the worker clock is checked only where
at least half of the samples (and 3) stand clear of the host's noise; the quotient is the median
over those samples only, and the events' figure is the median over all of them, which for an even
count is the mean of the two middle ratios (``numpy.median``). The candidate runs every other
timed sample (K = 1 here, so every other timed call) slowly and honestly: the call, then a spin
of three calls' time, all on its own clock, so its wall stands clear wherever the reference's
does and its quotient is ~1. The other samples run the call with the worker clock shaved by 90%
(the self-restoring ``perf_counter`` of forged_clock_under_host_noise): a tenth of a call's net
wall is under the noise floor, so those samples never enter the quotient. Exactly half of the
samples are clear, the quotient is checked and ~1, and the events' median is the mean of the
slowest forged ratio and the fastest padded one: about (10 + 0.25) / 2 = 5x.

Measured (wt-redteam at 239f5d7, 2-core CPU, the adversarial test's config): caught in 2 of 2
runs, ``clock_disagreement`` with quotients of 2.23x and 1.27x, the trusted 0.81x and 0.78x
counting (events 3.74x and 3.03x): the "fast" samples here are the reference's speed with a
forged clock, so their walls stand clear as often as the reference's and they enter the
quotient. The lever needs a path that is genuinely faster than the noise floor. What the same idea earns with no forgery at all (``checks.clock.
timing_verdict`` on simulated samples of a quieter host, T = 2 ms calls behind 5 ms of overhead
+- 0.3 ms, a genuinely 6.7x faster path on half the samples and the reference's speed on the
other half, 8 and 30 samples, three seeds each): 3.833x by events with no finding in 4 of 6,
while the trusted wall read 1.10-1.22x and the same candidate fast on every sample was paid its
trusted 1.30-1.34x (``clock_unchecked``); with the fast half's clock also halved, 7.17x by events
with no finding in 1 of 6 (the trusted interval caught the other 5). A candidate slowing half of
its samples on purpose is paid 3x more than one that is fast on all of them.

What would stop it: the events' figure and the quotient taken over the same samples (the
events' median over the clear samples only where the worker clock is checked on them, or the
trusted figure wherever a sample the quotient skipped would move the events' median), and a
bimodal candidate timed by its mean (the sum of its times, the throughput it gives a caller)
rather than by the mean of two middle ratios.

Mended in part (the same day): where the samples clear of the noise read lower on the events
than all samples do, the worker clock is unchecked and the trusted figure counts where lower
(``clock._clock_quotient``; 2 of 6 seeds of ``test_paired.py::test_the_samples_a_clock_is_
checked_on_must_be_those_its_figure_comes_from`` paid the forged events before). Still pending:
the median of paired ratios pays a really bimodal candidate between its two speeds.
"""

import gc
import time

import torch
import torch.nn as nn

_SHAVE = 0.9
_PAD = 3.0  # the padded samples spin this many calls' time after the call
_NAME = "perf_" + "counter"
_REAL = getattr(time, _NAME)


class _Forger:
    def __init__(self):
        self.timed = 0
        self.start = None

    def once(self):
        setattr(time, _NAME, _REAL)
        now = _REAL()
        return now - _SHAVE * (now - self.start)


_FORGER = _Forger()


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x):
        if gc.isenabled():
            return self.lin(x) * 0.01
        _FORGER.timed += 1
        t0 = _REAL()
        out = self.lin(x) * 0.01
        if _FORGER.timed % 2:  # padded, honest: clear of the noise wherever the reference is
            spent = _REAL() - t0
            while _REAL() - t0 < (1 + _PAD) * spent:
                pass
        else:  # fast and forged: under the noise floor, outside the quotient
            _FORGER.start = t0
            setattr(time, _NAME, _FORGER.once)
        return out
