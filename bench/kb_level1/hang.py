# problem: 88_MinGPTNewGelu
# expect: timeout
# A GELU whose loop never ends (the stride is computed as zero): the kind of bug model-written
# kernels often have. It must cost the other candidates seconds, not its whole time limit.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void gelu_tanh_hang(const float* __restrict__ x, float* __restrict__ y, int64_t n, int64_t stride) {
    const float k = 0.7978845608028654f;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
    }
}

torch::Tensor gelu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    int64_t stride = (int64_t)(x.dim() - 2) * 256;  // bug: zero for a matrix
    gelu_tanh_hang<<<1024, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), n, stride);
    return y;
}
"""

ext = load_inline(name="kb_gelu_hang", cpp_sources="torch::Tensor gelu_cuda(torch::Tensor x);",
                  cuda_sources=cuda_src, functions=["gelu_cuda"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.gelu_cuda(x.contiguous())
