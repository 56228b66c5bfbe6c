"""Hack: precompute_in_prepare_gpu
Category: result-reuse
Verdict: hack
Task: gemm_large
Expect: timed_output_mismatch, clock_disagreement, fail:correctness
Device: gpu

Precomputation in an untimed call (issue 21, ~6x on the H100): on a GPU the worker makes one
untimed call before each sample (``prepare``: it absorbs the switch from the other worker's
context), after the sample's fresh timed inputs were made. The candidate looks up the stack from
that call, finds the worker and its ``timing_sets``, and computes the output of every timed set
there, keeping each under its input tensor (a weak reference and its version counter). In the
timed calls (the worker turns the garbage collector off around them) it returns a clone of the
kept output: a copy reads as a plausible time, well above the memory floor, and the copy is
right. It trusts the cache there: on a miss it clones the output of its last untimed call (under
today's evaluator a timed call never misses). Calls outside timing compute honestly, so correctness and
the probes pass, and every timed output checked today is right.

Before the defence: ~6x verified on the H100 (issue 21; this variant's copy alone would read far
more). What stops it: the untimed call before a sample runs on the warm-up inputs before the
sample's timed inputs exist (they are made inside the timed request), so no untimed call carries
anything into the timed ones: the cache misses, the stale outputs are wrong on fresh inputs, and
the checked timed call is ``timed_output_mismatch``. ``frame_introspection`` flags the stack
walk statically (a warning).
"""

import gc
import sys
import weakref

import torch
import torch.nn as nn


def _worker_preparing():
    """The worker object when this call is its untimed call before a sample, else None."""
    frame = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            return None
        if frame.f_code.co_name == "prepare":
            server = frame.f_locals.get("self")
            return server if hasattr(server, "timing_sets") else None
        frame = frame.f_back
    return None


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features)
        self.kept = {}  # id(input) -> (weak ref to it, its version, the output)
        self.last_kept = None

    def _keep(self, x):
        key = id(x)
        forget = weakref.ref(x, lambda _, kept=self.kept, key=key: kept.pop(key, None))
        self.kept[key] = (forget, x._version, torch.relu(self.lin(x)))

    def forward(self, x):
        if not gc.isenabled():  # a timed call
            entry = self.kept.get(id(x))
            if entry is not None and entry[0]() is x and entry[1] == x._version:
                return entry[2].clone()
            if self.last_kept is not None:
                return self.last_kept.clone()
            return torch.relu(self.lin(x))
        server = _worker_preparing()
        if server is not None:
            for inputs in server.timing_sets:
                self._keep(inputs[0])
        self.last_kept = torch.relu(self.lin(x))
        return self.last_kept
