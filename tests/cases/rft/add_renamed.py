import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

code = """
#include <torch/extension.h>
torch::Tensor vec_add(torch::Tensor a, torch::Tensor b) {
    auto result = torch::empty_like(a);
    const float* x_ptr = a.data_ptr<float>();
    const float* y_ptr = b.data_ptr<float>();
    float* z_ptr = result.data_ptr<float>();
    const int64_t count = a.numel();
    for (int r = 0; r < 1; ++r)
        for (int64_t j = 0; j < count; ++j) z_ptr[j] = x_ptr[j] + y_ptr[j];
    return result;
}
"""

kernels = load_inline(name="rft_add_renamed", cpp_sources=code, functions=["vec_add"], with_cuda=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return kernels.vec_add(a.contiguous(), b.contiguous())
