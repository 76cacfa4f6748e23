# problem: 47_Sum_reduction_over_a_dimension
# expect: incorrect
# Off by one: the last row of every reduction is dropped.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// x is (B, R, C), reduced over R: one thread per (b, c), walking down R (coalesced across c).
__global__ void sum_mid(const float* __restrict__ x, float* __restrict__ y, int64_t R, int64_t C, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int64_t b = i / C, c = i % C;
    const float* p = x + b * R * C + c;
    double acc = 0.0;
    for (int64_t r = 0; r + 1 < R; ++r) acc += p[r * C];
    y[i] = (float)acc;
}

torch::Tensor sum_cuda(torch::Tensor x, int64_t dim) {
    TORCH_CHECK(dim == 1 && x.dim() == 3, "expects a 3-d input reduced over dim 1");
    auto y = torch::empty({x.size(0), 1, x.size(2)}, x.options());
    int64_t n = x.size(0) * x.size(2);
    sum_mid<<<(unsigned)((n + 255) / 256), 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), x.size(1), x.size(2), n);
    return y;
}
"""

ext = load_inline(name="kb_sum_short", cpp_sources="torch::Tensor sum_cuda(torch::Tensor x, int64_t dim);",
                  cuda_sources=cuda_src, functions=["sum_cuda"])


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return ext.sum_cuda(x.contiguous(), self.dim)
