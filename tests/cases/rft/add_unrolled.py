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
    int64_t left = a.numel();
    while (left >= 4) {
        float s0 = pa[0] + pb[0], s1 = pa[1] + pb[1], s2 = pa[2] + pb[2], s3 = pa[3] + pb[3];
        po[0] = s0; po[1] = s1; po[2] = s2; po[3] = s3;
        pa += 4; pb += 4; po += 4; left -= 4;
    }
    while (left-- > 0) *po++ = *pa++ + *pb++;
    return out;
}
"""

ext = load_inline(name="rft_add_unrolled", cpp_sources=src, functions=["add_cpu"], with_cuda=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return ext.add_cpu(a.contiguous(), b.contiguous())
