# problem: 1_Add
# expect: runtime_error
# Right values, but it asks for 256 TiB of scratch first: far beyond what the problem needs. With
# the device to itself (no other process of the verifier holding memory) it is the candidate's
# own failure, a runtime_error, never an infra error.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

add_source = """
#include <torch/extension.h>
torch::Tensor add_cpu(torch::Tensor a, torch::Tensor b) {
    auto scratch = torch::empty({int64_t(1) << 48}, a.options().dtype(torch::kUInt8));
    auto out = torch::empty_like(a);
    const float* pa = a.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i < a.numel(); ++i) po[i] = pa[i] + pb[i];
    return out;
}
"""

add_ext = load_inline(name="add_hog_ext", cpp_sources=add_source, functions=["add_cpu"],
                      with_cuda=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return add_ext.add_cpu(a.contiguous(), b.contiguous())
