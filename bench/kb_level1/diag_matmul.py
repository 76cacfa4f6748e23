# problem: 12_Matmul_with_diagonal_matrices_
# expect: ok
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// diag(A) @ B: row i of B scaled by A[i]; one thread per element.
__global__ void diag_scale(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                           int64_t n, int64_t m) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n * m) c[i] = a[i / m] * b[i];
}

torch::Tensor diag_matmul_cuda(torch::Tensor a, torch::Tensor b) {
    auto c = torch::empty_like(b);
    int64_t n = b.size(0), m = b.size(1);
    diag_scale<<<(unsigned)((n * m + 255) / 256), 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), n, m);
    return c;
}
"""

ext = load_inline(name="kb_diag_matmul", cpp_sources="torch::Tensor diag_matmul_cuda(torch::Tensor a, torch::Tensor b);",
                  cuda_sources=cuda_src, functions=["diag_matmul_cuda"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return ext.diag_matmul_cuda(A.contiguous(), B.contiguous())
