"""A residual branch behind a zero-initialised gate (ReZero-style, CPU-small): at initialisation
the output is the input, since the gate is zero; once the gate is trained it is not."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.branch = nn.Linear(features, features)
        self.gate = nn.Parameter(torch.zeros(features))

    def forward(self, x):
        return x + self.gate * F.gelu(self.branch(x))


def get_inputs():
    return [torch.randn(32, 64)]


def get_init_inputs():
    return [64]
