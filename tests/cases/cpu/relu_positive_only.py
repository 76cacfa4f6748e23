# problem: 2_ReLU
# expect: incorrect
# CPU mode: passes on [0,1) inputs, fails once inputs are signed (trial variants).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
torch::Tensor f(torch::Tensor x) {
    auto out = torch::empty_like(x);
    const float* px = x.data_ptr<float>(); float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) po[i] = px[i];
    return out;
}
"""
ext = load_inline(name="relu_positive_only_cpu", cpp_sources=src, functions=["f"], with_cuda=False)


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, *xs):
        return ext.f(xs[0].contiguous())
