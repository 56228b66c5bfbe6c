"""tanh(x) * 2 (CPU-small), with an input generator that imports a standard-library module on
first use, as task code that reaches for numpy or scipy inside ``get_inputs`` does: trusted code
of the reference's worker importing a module after candidates have run."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 2.0


def get_inputs():
    import statistics

    return [torch.randn(32, 64) * statistics.fmean([1.0, 1.0])]


def get_init_inputs():
    return []
