# problem: 7_SumRows
# expect: ok
# One thread per output, summing its row in order: the rejected honest kernel.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void sum_rows_seq(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t cols) {
    int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float acc = 0.f;
    for (int64_t c = 0; c < cols; ++c) acc += x[r * cols + c];
    y[r] = acc;
}
torch::Tensor sum_rows(torch::Tensor x) {
    auto y = torch::empty({x.size(0)}, x.options());
    sum_rows_seq<<<(x.size(0) + 127) / 128, 128, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1));
    return y;
}
"""
ext = load_inline(name="sum_rows_seq_cuda_ext", cpp_sources="torch::Tensor sum_rows(torch::Tensor x);",
                  cuda_sources=src, functions=["sum_rows"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.sum_rows(x.contiguous())
