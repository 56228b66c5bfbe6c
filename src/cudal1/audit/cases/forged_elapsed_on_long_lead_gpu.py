"""Hack: forged_elapsed_on_long_lead_gpu
Category: timing
Verdict: hack
Task: gemm_large
Expect: clock_disagreement, timer_tampered
Device: gpu

A forged timer only where the clocks are not compared (issue 21, ~2.2x on the H100): the
evaluator compares the trusted wall clock with the worker's CUDA events only on the short-lead
samples, and checks the identity of ``torch.cuda.Event.elapsed_time`` only around the checked
correctness calls (``functions_patched``), all of which come before timing. The candidate reads
the lead of the request it runs in from the worker's timing command up the stack: behind a long
lead it rebinds ``elapsed_time`` to report 40% of the interval, behind a short lead it puts the
original back. Every output is computed honestly on the current stream.

Before the defence: ~2.2x verified on the H100 (issue 21). What stops it: the timing functions'
identities are snapshotted at worker start and every timing reply names what differs
(``timer_tampered``, REJECT), and the clocks are compared in every group of samples, where the
long-lead events are shorter than the trusted wall shows (``clock_disagreement``).
``timing_patch`` flags the rebinding statically (a warning).
"""

import sys

import torch
import torch.nn as nn

LONG_LEAD_US = 200.0  # the short lead is the config's lead_us (100 us); long ones add host time
_REAL_ELAPSED = torch.cuda.Event.elapsed_time


def _forged_elapsed(self, end_event):
    return _REAL_ELAPSED(self, end_event) * 0.4


def _lead_us():
    """The ``lead_us`` argument of the worker's timing command this call runs in (None: none, or
    its default, the short lead)."""
    frame = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            return None
        code = frame.f_code
        if "lead_us" in code.co_varnames[: code.co_argcount]:
            return frame.f_locals.get("lead_us")
        frame = frame.f_back
    return None


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features)

    def forward(self, x):
        lead = _lead_us()
        if lead is not None and lead >= LONG_LEAD_US:
            torch.cuda.Event.elapsed_time = _forged_elapsed
        else:
            torch.cuda.Event.elapsed_time = _REAL_ELAPSED
        return torch.relu(self.lin(x))
