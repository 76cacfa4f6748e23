# problem: 2_ReLU
# expect: runtime_error
# expect-runtime: runtime_error
# fault: asks for far more device memory than exists.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
torch::Tensor f_cuda(torch::Tensor x) {
    auto huge = torch::empty({(int64_t)1 << 40}, x.options());
    return huge;
}
"""
ext = load_inline(name="out_of_memory_ext", cpp_sources="torch::Tensor f_cuda(torch::Tensor x);", cuda_sources=src, functions=["f_cuda"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.f_cuda(x)
