# problem: 2_ReLU
# expect: runtime_error
# expect-runtime: runtime_error
# fault: the host code aborts the process.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <cstdlib>
torch::Tensor f_cuda(torch::Tensor x) { abort(); return x; }
"""
ext = load_inline(name="abort_ext", cpp_sources="torch::Tensor f_cuda(torch::Tensor x);", cuda_sources=src, functions=["f_cuda"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.f_cuda(x)
