import torch
import torch.nn as nn


class Model(nn.Module):
    """Conv2d (no padding), 2x2 max pooling, sigmoid, then a sum over channels."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, pool_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.pool = nn.MaxPool2d(pool_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.sigmoid(self.pool(self.conv(x)))
        return torch.sum(x, dim=1)


batch_size = 64
in_channels = 16
out_channels = 32
kernel_size = 3
pool_size = 2
height = 64
width = 64


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, pool_size]
