# problem: 1_Add
# expect: incorrect
# CPU mode: subtracts instead of adding.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
torch::Tensor f(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    const float* pa = a.data_ptr<float>(); const float* pb = b.data_ptr<float>(); float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < a.numel(); ++i) po[i] = pa[i] - pb[i];
    return out;
}
"""
ext = load_inline(name="wrong_add_cpu", cpp_sources=src, functions=["f"], with_cuda=False)


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, *xs):
        return ext.f(xs[0].contiguous(), xs[1].contiguous())
