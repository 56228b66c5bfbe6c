"""A 1024-term dot product per output, scaled by 0.01 (CPU-small): the fp32 tolerance's absolute
part dominates, so arithmetic at 10 fraction bits passes the tolerance, and only the errors
against float64, measured against what the reference itself shows, can tell."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x):
        return self.lin(x) * 0.01


def get_inputs():
    return [torch.rand(64, 1024)]


def get_init_inputs():
    return [1024, 256]
