# problem: 7_SumRows
# expect: ok
# One block per row, a shared-memory tree: another summation order than torch.sum's.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void sum_rows_tree(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
    __shared__ float part[256];
    const float* row = x + (int64_t)blockIdx.x * cols;
    float acc = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) acc += row[c];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) y[blockIdx.x] = part[0];
}
torch::Tensor sum_rows(torch::Tensor x) {
    auto y = torch::empty({x.size(0)}, x.options());
    sum_rows_tree<<<x.size(0), 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), x.size(1));
    return y;
}
"""
ext = load_inline(name="sum_rows_tree_ext", cpp_sources="torch::Tensor sum_rows(torch::Tensor x);",
                  cuda_sources=src, functions=["sum_rows"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.sum_rows(x.contiguous())
