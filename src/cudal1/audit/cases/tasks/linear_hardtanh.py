"""Linear layer then Hardtanh to [-3, 3] (CPU-small): with the default weights and randn inputs
the layer's outputs stay within about two, so the clamp never bites on the task's own draws."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features)

    def forward(self, x):
        return F.hardtanh(self.lin(x), -3.0, 3.0)


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return [64, 32]
