# problem: 2_ReLU
# expect: timeout
# expect-runtime: timeout
# fault: a kernel that never ends.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void spin(float* y, int n) { volatile int k = 0; while (n > 0) { k = k + 1; } y[0] = k; }
torch::Tensor f_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    spin<<<1, 1, 0, at::cuda::getCurrentCUDAStream()>>>(y.data_ptr<float>(), 1);
    return y;
}
"""
ext = load_inline(name="infinite_loop_ext", cpp_sources="torch::Tensor f_cuda(torch::Tensor x);", cuda_sources=src, functions=["f_cuda"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.f_cuda(x)
