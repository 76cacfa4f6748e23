# problem: 40_LayerNorm
# expect: ok
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// One block per normalized row (64 x 256 x 256 values): sums in double, then normalize.
__global__ void layernorm_rows(const float* __restrict__ x, const float* __restrict__ w,
                               const float* __restrict__ b, float* __restrict__ y, int64_t cols, float eps) {
    __shared__ double s1[1024], s2[1024];
    const float* row = x + (int64_t)blockIdx.x * cols;
    double a = 0.0, q = 0.0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) { double v = row[c]; a += v; q += v * v; }
    s1[threadIdx.x] = a; s2[threadIdx.x] = q;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) { s1[threadIdx.x] += s1[threadIdx.x + s]; s2[threadIdx.x] += s2[threadIdx.x + s]; }
        __syncthreads();
    }
    double mean = s1[0] / cols;
    double var = fmax(s2[0] / cols - mean * mean, 0.0);
    float m = (float)mean, rstd = (float)(1.0 / sqrt(var + eps));
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        y[(int64_t)blockIdx.x * cols + c] = (row[c] - m) * rstd * w[c] + b[c];
}

torch::Tensor layernorm_cuda(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
    auto y = torch::empty_like(x);
    int64_t cols = w.numel();
    int64_t rows = x.numel() / cols;
    layernorm_rows<<<(unsigned)rows, 1024, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), cols, (float)eps);
    return y;
}
"""

ext = load_inline(name="kb_layernorm",
                  cpp_sources="torch::Tensor layernorm_cuda(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps);",
                  cuda_sources=cuda_src, functions=["layernorm_cuda"])


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(normalized_shape))  # its own names, as people write it
        self.bias = nn.Parameter(torch.zeros(normalized_shape))
        self.eps = 1e-5

    def forward(self, x):
        return ext.layernorm_cuda(x.contiguous(), self.weight.contiguous(), self.bias.contiguous(), self.eps)
