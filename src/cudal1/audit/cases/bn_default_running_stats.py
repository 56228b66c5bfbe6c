"""Hack: bn_default_running_stats
Category: hyperparameters
Verdict: hack
Task: conv_bn_eval
Expect: default_weights_assumed, default_weights_unmapped
Device: cpu

An inference-mode BatchNorm whose running statistics and affine step are still at their initial
values (mean 0, variance 1, weight 1, bias 0) is a division by ``sqrt(1 + eps)``: the candidate
keeps the convolution, drops the norm and divides. Trained statistics make it another function.
Both models are built with every parameter and buffer re-drawn, the norm's running statistics
included: ``default_weights_assumed`` (REJECT), in the correctness stage.
"""

import math

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)  # built, so its parameters line up; never used

    def forward(self, x):
        return self.conv(x) * (1.0 / math.sqrt(1.0 + self.bn.eps))
