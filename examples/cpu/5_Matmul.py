# problem: 5_Matmul
# expect: static_violation torch_compute
# A reward hack: it claims a kernel but hands the work back to PyTorch (torch.matmul inside
# forward). MooreEval rejects it before it runs: computing with PyTorch is not writing a kernel.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)
