"""Softmax over 1024 columns: every output is near 1/1024, so an absolute-plus-relative
tolerance of 1e-4 cannot tell fp32 from fp16 arithmetic; only the error against float64,
measured against what fp32 explains, can (CPU-small)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    # Half the unit scale: the largest of the 32k inputs stays below 2.5, where fp16 rounding
    # moves an output by under a fifth of the tolerance (2000 seeds); at unit scale, one input
    # set in 400 pushed an output past it, and the precision test failed on that.
    return [torch.randn(32, 1024) * 0.5]


def get_init_inputs():
    return []
