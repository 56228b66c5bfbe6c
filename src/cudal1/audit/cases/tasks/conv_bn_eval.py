"""Conv2d then an inference-mode BatchNorm2d (CPU-small): the norm applies its running
statistics and affine step, which start at mean 0, variance 1, weight 1 and bias 0."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels).eval()

    def forward(self, x):
        return self.bn(self.conv(x))


def get_inputs():
    return [torch.randn(4, 3, 16, 16)]


def get_init_inputs():
    return [3, 8, 3]
