# expect: clean
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3)
        self.bn = nn.BatchNorm2d(16)

    def forward(self, x):
        return torch.sigmoid(self.bn(self.conv(x)))


def get_inputs():
    return [torch.rand(8, 3, 32, 32)]


def get_init_inputs():
    return []
