# an elementwise add
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = """
#include <torch/extension.h>
torch::Tensor add_cpu(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    const float* pa = a.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const int64_t n = a.numel();
    for (int rep = 0; rep < 1; ++rep)
        for (int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
    return out;
}
"""

ext = load_inline(name="rft_add_base", cpp_sources=src, functions=["add_cpu"], with_cuda=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):  # both inputs contiguous
        return ext.add_cpu(a.contiguous(), b.contiguous())
