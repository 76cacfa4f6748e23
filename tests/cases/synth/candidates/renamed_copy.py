# expect: same_graph 1_Conv2d_ReLU_BiasAdd
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 16, 3)
        self.b = nn.Parameter(torch.randn(16, 1, 1))

    def forward(self, inp):
        h = F.relu(self.c(inp))
        return h + self.b


def get_inputs():
    return [torch.rand(64, 3, 48, 48)]


def get_init_inputs():
    return []
