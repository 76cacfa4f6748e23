# expect: non-finite
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.log(x - 2.0)


def get_inputs():
    return [torch.rand(64, 128)]


def get_init_inputs():
    return []
