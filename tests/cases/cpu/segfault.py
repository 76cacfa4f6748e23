# problem: 1_Add
# expect: runtime_error
# CPU mode: null pointer write in the extension.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
torch::Tensor f(torch::Tensor a, torch::Tensor b) { volatile float* p = nullptr; p[0] = 1.f; return a; }
"""
ext = load_inline(name="segfault_cpu", cpp_sources=src, functions=["f"], with_cuda=False)


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, *xs):
        return ext.f(xs[0], xs[1])
