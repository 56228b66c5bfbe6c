"""Linear layer, scaled by a hyperparameter, then ReLU (CPU-small)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        return torch.relu(self.lin(x) * self.scale)


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return [64, 32, 0.5]
