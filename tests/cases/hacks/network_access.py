# problem: 2_ReLU
# expect: static_violation network_access
# expect-runtime: load_error
# network access: phones home at import.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void relu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}
torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
ext = load_inline(name="net_ext", cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);", cuda_sources=src, functions=["relu_cuda"])

import socket
s = socket.create_connection(("127.0.0.1", 9), timeout=2)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_cuda(x)
