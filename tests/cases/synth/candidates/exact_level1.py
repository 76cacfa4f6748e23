# expect: same_graph 19_ReLU
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.r = nn.ReLU()

    def forward(self, a):
        return self.r(a)


def get_inputs():
    return [torch.rand(16, 16384)]


def get_init_inputs():
    return []
