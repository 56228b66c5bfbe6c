"""ReLU, then a clamp at six as an op of its own (CPU-medium, 64 x 1024): randn never reaches six
standard deviations, so on the task's own inputs the clamp never bites; the output is never
negative."""

import torch
import torch.nn as nn

batch_size = 64
features = 1024


class Model(nn.Module):
    def __init__(self, bound):
        super().__init__()
        self.bound = bound

    def forward(self, x):
        return torch.clamp(torch.relu(x), max=self.bound)


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [6.0]
