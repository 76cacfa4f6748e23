# problem: 1_Add
# expect: ok
# Honest: a static helper function, a static const table, constexpr and __constant__ data.
# None of them is state that changes between calls (the stale_result rule must stay quiet).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

constexpr int kBlock = 256;
static constexpr int kUnroll = 1;
static const float kOnes[2] = {1.f, 1.f};
__constant__ float c_alpha = 1.0f;

static unsigned int grid_for(int64_t n, unsigned int block) {
    return static_cast<unsigned int>((n + block - 1) / block);
}

__global__ void add_kernel(const float* __restrict__ a, const float* __restrict__ b,
                           float* __restrict__ y, int64_t n, float one) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = c_alpha * a[i] + one * b[i];
}

torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b) {
    auto y = torch::empty_like(a);
    int64_t n = a.numel();
    add_kernel<<<grid_for(n, kBlock * kUnroll), kBlock, 0, at::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), n, kOnes[0]);
    return y;
}
"""
ext = load_inline(name="add_static_helpers_ext",
                  cpp_sources="torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b);",
                  cuda_sources=src, functions=["add_cuda"])


class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.add_cuda(a.contiguous(), b.contiguous())
