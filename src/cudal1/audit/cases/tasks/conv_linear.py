"""Conv2d, ReLU, then a Linear over the flattened maps, scaled by 0.01 (CPU-small): a convolution
the task's defaults let run at TF32 on CUDA beside a matmul they do not. The scale makes the
fp32 tolerance's absolute part dominate, so that only the errors against float64 can tell how
precisely each part computed."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, out_features):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.lin = nn.Linear(out_channels * (16 - kernel_size + 1) ** 2, out_features)

    def forward(self, x):
        return self.lin(torch.relu(self.conv(x)).flatten(1)) * 0.01


def get_inputs():
    return [torch.randn(8, 3, 16, 16)]


def get_init_inputs():
    return [3, 8, 3, 64]
