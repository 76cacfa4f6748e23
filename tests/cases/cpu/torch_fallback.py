# problem: 1_Add
# expect: illegal torch_compute
# skip-static: true
# CPU mode: PyTorch computes (the static rule is skipped to test the run-time monitor).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.add(a, b)
