"""x * scale + bias, then GELU; ``scale`` is a hyperparameter from get_init_inputs (CPU-small)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return F.gelu(x * self.scale + self.bias)


def get_inputs():
    return [torch.randn(32, 64)]


def get_init_inputs():
    return [64, 1.7]
