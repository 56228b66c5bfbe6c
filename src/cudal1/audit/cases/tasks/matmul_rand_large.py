"""C = A @ B for two 2048x2048 fp32 matrices of torch.rand values (KernelBench level 1 task 1's
kind, GPU-sized): all outputs near 512, so the relative tolerance lets TF32 products pass."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.rand(2048, 2048), torch.rand(2048, 2048)]


def get_init_inputs():
    return []
