# problem: 2_ReLU
# expect: static_violation side_stream
# expect-runtime: illegal side_stream
# side stream: the real work goes to a pool stream the timer's stream does not wait for.
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
__global__ void nothing() {}
torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    auto side = at::cuda::getStreamFromPool();
    relu_kernel<<<(n + 255) / 256, 256, 0, side.stream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    nothing<<<1, 1, 0, at::cuda::getCurrentCUDAStream()>>>();
    return y;
}
"""
ext = load_inline(name="side_ext", cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);", cuda_sources=src, functions=["relu_cuda"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_cuda(x)
