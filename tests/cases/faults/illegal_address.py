# problem: 2_ReLU
# expect: runtime_error
# expect-runtime: runtime_error
# fault: a kernel writes far outside its buffer (illegal address).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void bad(float* y) { y[(int64_t)threadIdx.x * (1LL << 36)] = 1.f; }
torch::Tensor f_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    bad<<<1, 32, 0, at::cuda::getCurrentCUDAStream()>>>(y.data_ptr<float>());
    C10_CUDA_CHECK(cudaDeviceSynchronize());
    return y;
}
"""
ext = load_inline(name="illegal_address_ext", cpp_sources="torch::Tensor f_cuda(torch::Tensor x);", cuda_sources=src, functions=["f_cuda"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.f_cuda(x)
