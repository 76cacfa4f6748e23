# problem: 4_LayerNorm
# expect: ok
# Holds its own weight and bias (the reference names them ln.weight / ln.bias): parameter
# re-draws must reach them by order and shape.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// One block per row; mean and variance in one pass (Welford would be safer for huge rows).
__global__ void layernorm_rows(const float* __restrict__ x, const float* __restrict__ w,
                               const float* __restrict__ b, float* __restrict__ y, int cols,
                               float eps) {
    __shared__ float s1[256], s2[256];
    const float* row = x + (int64_t)blockIdx.x * cols;
    float a = 0.f, q = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) { float v = row[c]; a += v; q += v * v; }
    s1[threadIdx.x] = a; s2[threadIdx.x] = q;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) { s1[threadIdx.x] += s1[threadIdx.x + s]; s2[threadIdx.x] += s2[threadIdx.x + s]; }
        __syncthreads();
    }
    float mean = s1[0] / cols;
    float var = fmaxf(s2[0] / cols - mean * mean, 0.f);
    float rstd = rsqrtf(var + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        y[(int64_t)blockIdx.x * cols + c] = (row[c] - mean) * rstd * w[c] + b[c];
}

torch::Tensor layernorm_cuda(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
    auto y = torch::empty_like(x);
    int cols = x.size(-1);
    int rows = x.numel() / cols;
    layernorm_rows<<<rows, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), cols, (float)eps);
    return y;
}
"""

ln_ext = load_inline(name="layernorm_own_params_ext",
                     cpp_sources="torch::Tensor layernorm_cuda(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps);",
                     cuda_sources=cuda_src, functions=["layernorm_cuda"])


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))

    def forward(self, x):
        return ln_ext.layernorm_cuda(x.contiguous(), self.weight, self.bias, 1e-5)
