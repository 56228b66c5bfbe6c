"""Hack: side_stream_on_long_lead_gpu
Category: streams
Verdict: hack
Task: gemm_large
Expect: clock_disagreement
Device: gpu

Clocks compared on some samples only (issue 21, ~1.6x on the H100): the evaluator times the main
samples behind a long GPU spin (the lead, long enough for the host to queue all K calls) and
compares its trusted wall clock with the worker's events only on the few short-lead samples
after them. The candidate reads the lead of the request it runs in from the worker's timing
command up the stack. Behind a short lead (and outside timing) it is honest. Behind a long lead
it computes half the rows on the current stream and the other half on a fresh side stream that
waits for that first half and is never joined: the end event on the current stream fires before
the side stream's half runs, so the events see half the work. The worker's device-wide sync
before it replies puts the other half on the trusted wall, but the wall is not compared on these
samples; the output, digested after that sync, is right. (Offloading everything would read an
impossible time and trip ``faster_than_memory_floor``.)

Before the defence: ~1.6x verified on the H100 (issue 21). With the clocks compared in every
group of samples and a lead that fills every SM (2026-11-26, H100): 1.16x on the events and
accepted, since K calls overlap and only the last call's half ran past the end event, 0.03 ms a
call of trusted excess, inside the wall comparison's noise. What stops it: the worker records an
event once every stream of its process is done, and the tail from the end event to it is
compared with the reference's on the GPU's own clock (``checks.clock``): the hidden half is
``clock_disagreement``, and the events with every stream's work counted decide.
``thread_or_stream`` flags the unjoined stream statically (a warning).
"""

import sys

import torch
import torch.nn as nn

LONG_LEAD_US = 200.0  # the short lead is the config's lead_us (100 us); long ones add host time


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
        if lead is None or lead < LONG_LEAD_US:
            return torch.relu(self.lin(x))
        weight_t, bias = self.lin.weight.detach().t(), self.lin.bias.detach()
        out = torch.empty(x.shape[0], weight_t.shape[1], device=x.device, dtype=x.dtype)
        half = x.shape[0] // 2
        torch.addmm(bias, x[half:], weight_t, out=out[half:]).relu_()
        side = torch.cuda.Stream()  # a local: no attribute lists it
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.addmm(bias, x[:half], weight_t, out=out[:half]).relu_()
        return out
