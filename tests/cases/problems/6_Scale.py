import torch
import torch.nn as nn


class Model(nn.Module):
    """y = x * scale, with an int scale from get_init_inputs (CPU-mode test problem)."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x * self.scale


def get_inputs():
    return [torch.rand(4096)]


def get_init_inputs():
    return [3]
