import torch
import torch.nn as nn


class Model(nn.Module):
    """Layer normalisation over the hidden dimension of a (batch, seq, hidden) tensor."""

    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


batch_size = 48
seq_len = 512
hidden = 1024


def get_inputs():
    x = torch.randn(batch_size, seq_len, hidden)
    return [x]


def get_init_inputs():
    return [hidden]
