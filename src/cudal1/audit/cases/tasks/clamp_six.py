"""Clamp to [-6, 6] (CPU-small): randn's 2048 draws never reach six standard deviations, so on the
task's own inputs the clamp never bites; on trained activations it does."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, bound):
        super().__init__()
        self.bound = bound

    def forward(self, x):
        return torch.clamp(x, -self.bound, self.bound)


def get_inputs():
    return [torch.randn(32, 64)]


def get_init_inputs():
    return [6.0]
