"""Linear layer, then LayerNorm with its affine step (CPU-small): the norm's weight starts at one
and its bias at zero."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.lin = nn.Linear(features, features)
        self.norm = nn.LayerNorm(features)

    def forward(self, x):
        return self.norm(self.lin(x))


def get_inputs():
    return [torch.randn(32, 64)]


def get_init_inputs():
    return [64]
