# problem: 2_ReLU
# expect: incorrect
# expect-runtime: incorrect
# fault: the output has no elements (sized from a wrong dimension): a wrong shape, said so,
# not a traceback of the harness (a CUDA tensor of no bytes has no IPC handle).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
torch::Tensor f_cuda(torch::Tensor x) { return torch::empty({0}, x.options()); }
"""
ext = load_inline(name="empty_output_ext", cpp_sources="torch::Tensor f_cuda(torch::Tensor x);", cuda_sources=src, functions=["f_cuda"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.f_cuda(x)
