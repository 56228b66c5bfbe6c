"""Linear layer then ReLU, CPU-medium (~0.06 ms a call on one core): the GEMM outweighs the
per-call overhead, and even on a loaded runner (up to ~8x slower) a call stays under the 0.5 ms
below which several calls make one timed sample, so work a candidate skips on some calls or
moves out of the timed calls shows as a gain on a CPU runner."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.lin(x))


def get_inputs():
    return [torch.randn(32, 256)]


def get_init_inputs():
    return [256, 256]
