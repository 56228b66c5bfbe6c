"""Linear layer, a learnable per-channel scale initialised to one, then ReLU (CPU-small): the
scale is a parameter the model makes itself (``nn.Parameter(torch.ones(n))``)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features)
        self.alpha = nn.Parameter(torch.ones(out_features))

    def forward(self, x):
        return torch.relu(self.lin(x) * self.alpha)


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return [64, 32]
