# problem: 1_Add
# expect: ok
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

add_source = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

__global__ void add_kernel(const float4* __restrict__ a, const float4* __restrict__ b,
                           float4* __restrict__ out, int64_t n4) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * blockDim.x) {
        float4 x = a[i], y = b[i];
        out[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
}

__global__ void add_tail(const float* a, const float* b, float* out, int64_t start, int64_t n) {
    int64_t i = start + blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    int64_t n = a.numel(), n4 = n / 4;
    auto stream = at::cuda::getCurrentCUDAStream();
    if (n4 > 0) {
        int blocks = (int)std::min<int64_t>((n4 + 255) / 256, 4096);
        add_kernel<<<blocks, 256, 0, stream>>>((const float4*)a.data_ptr<float>(),
            (const float4*)b.data_ptr<float>(), (float4*)out.data_ptr<float>(), n4);
    }
    if (n % 4) add_tail<<<1, 4, 0, stream>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                              out.data_ptr<float>(), n4 * 4, n);
    return out;
}
"""

add_ext = load_inline(name="add_ext", cpp_sources="torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b);",
                      cuda_sources=add_source, functions=["add_cuda"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return add_ext.add_cuda(a.contiguous(), b.contiguous())
