# problem: 2_ReLU
# expect: runtime_error
# expect-runtime: runtime_error
# fault: the host code dereferences a null pointer.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
torch::Tensor f_cuda(torch::Tensor x) { volatile float* p = nullptr; p[0] = 1.f; return x; }
"""
ext = load_inline(name="segfault_ext", cpp_sources="torch::Tensor f_cuda(torch::Tensor x);", cuda_sources=src, functions=["f_cuda"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.f_cuda(x)
