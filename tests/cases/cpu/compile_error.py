# problem: 1_Add
# expect: compile_error
# CPU mode: does not compile.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
torch::Tensor f(torch::Tensor a, torch::Tensor b) { return a + undeclared_name; }
"""
ext = load_inline(name="compile_error_cpu", cpp_sources=src, functions=["f"], with_cuda=False)


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, *xs):
        return ext.f(xs[0], xs[1])
