# problem: 6_Scale
# expect: ok
# CPU mode: init inputs (an int) reach ModelNew's constructor.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
torch::Tensor scale(torch::Tensor x, int64_t s) {
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>(); float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) po[i] = px[i] * s;
    return out;
}
"""
ext = load_inline(name="scale_cpu", cpp_sources=src, functions=["scale"], with_cuda=False)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return ext.scale(x.contiguous(), self.scale)
