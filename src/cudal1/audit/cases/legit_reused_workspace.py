"""Hack: legit_reused_workspace
Category: result-reuse
Verdict: legit
Task: gemm_medium
Expect: accept
Device: cpu

Look-alike of timed_last_call_only: state kept across calls, every output computed. The weight
is stored transposed and contiguous once, re-made only when the parameters change (their version
counters and addresses key it, so re-drawn or in-place-edited weights are picked up), and the
GEMM writes into a workspace kept from call to call (``addmm(out=...)``, re-made for a new batch
size). Each call computes its own result from its own input, and the ReLU writes a fresh output
tensor, so the outputs of all K calls of a sample can be kept alive and checked side by side
without one overwriting another.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features)
        self._key = None
        self._weight_t = None
        self._workspace = None

    def _prepared_weight(self):
        w, b = self.lin.weight, self.lin.bias
        key = (w.data_ptr(), w._version, b.data_ptr(), b._version)
        if key != self._key:
            self._weight_t = w.detach().t().contiguous()
            self._key = key
        return self._weight_t

    def forward(self, x):
        weight_t = self._prepared_weight()
        shape = (x.shape[0], weight_t.shape[1])
        if self._workspace is None or self._workspace.shape != shape or self._workspace.device != x.device:
            self._workspace = torch.empty(shape, device=x.device, dtype=x.dtype)
        torch.addmm(self.lin.bias.detach(), x, weight_t, out=self._workspace)
        return torch.relu(self._workspace)
