"""Linear layer then ReLU, GPU-sized: long enough (~0.5 ms) that work hidden from the timer
stands out from launch noise."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.lin(x))


def get_inputs():
    return [torch.randn(2048, 2048)]


def get_init_inputs():
    return [2048, 2048]
