import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """ResNet basic block: two 3x3 conv + BatchNorm layers, identity shortcut, ReLU.

    BatchNorm uses its running statistics (inference semantics), so forward is a pure function
    of its input whatever mode the module is in.
    """

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        with torch.no_grad():
            for bn in (self.bn1, self.bn2):
                bn.running_mean.uniform_(-0.5, 0.5)
                bn.running_var.uniform_(0.5, 1.5)
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-0.5, 0.5)

    @staticmethod
    def _norm(x: torch.Tensor, bn: nn.BatchNorm2d) -> torch.Tensor:
        return F.batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias, training=False, eps=bn.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self._norm(self.conv1(x), self.bn1))
        out = self._norm(self.conv2(out), self.bn2)
        return F.relu(out + x)


batch_size = 16
channels = 64
height = 56
width = 56


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [channels]
