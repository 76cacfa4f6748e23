import torch
import torch.nn as nn


class Model(nn.Module):
    """ReLU: zero for negative inputs, which KernelBench's [0, 1) inputs never contain."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 64
dim = 16384


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
