import torch
import torch.nn as nn


class Model(nn.Module):
    """A convolution, clamped from above where the task's inputs never reach, then a sigmoid."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3)

    def forward(self, x):
        return torch.sigmoid(torch.clamp(self.conv(x), max=CLAMP))


CLAMP = 8.0


def get_inputs():
    return [torch.randn(16, 8, 32, 32)]


def get_init_inputs():
    return []
