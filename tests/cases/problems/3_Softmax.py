import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over long rows: every output is far below atol=1e-4."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


batch_size = 16
dim = 65536


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
