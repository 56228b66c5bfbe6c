"""Linear layer then ReLU whose sizes are module-level constants, KernelBench style, so the
evaluator can also try another batch size (CPU-small)."""

import torch
import torch.nn as nn

batch_size = 16
in_features = 64
out_features = 32


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.lin = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.lin(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
