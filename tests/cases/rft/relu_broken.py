import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = """
#include <torch/extension.h>
torch::Tensor relu_cpu(torch::Tensor x) {
    auto out = torch::empty_like(x)
    return out;
}
"""

ext = load_inline(name="rft_relu_broken", cpp_sources=src, functions=["relu_cpu"], with_cuda=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_cpu(x.contiguous())
