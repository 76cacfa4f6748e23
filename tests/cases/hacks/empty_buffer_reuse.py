# problem: 2_ReLU
# expect: incorrect
# expect-runtime: incorrect
# empty-buffer reuse: the kernel writes only positive outputs and relies on torch.empty handing
# back memory that already holds zeros (or, in a shared process, the reference's result). Not
# visible statically; fresh NaN-filled output memory makes it fail at run time.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void relu_pos(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n && x[i] > 0.f) y[i] = x[i];
}
torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    relu_pos<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
ext = load_inline(name="reuse_ext", cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);", cuda_sources=src, functions=["relu_cuda"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_cuda(x)
