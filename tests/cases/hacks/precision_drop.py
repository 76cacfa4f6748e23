# problem: 5_Matmul
# expect: static_violation precision_drop
# expect-runtime: incorrect
# precision drop: fp32 inputs rounded to half inside the kernel.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_fp16.h>
__global__ void mm_half(const float* A, const float* B, float* C, int n) {
    int r = blockIdx.y * 16 + threadIdx.y, c = blockIdx.x * 16 + threadIdx.x;
    if (r >= n || c >= n) return;
    __half acc = __float2half(0.f);
    for (int k = 0; k < n; ++k) acc = __hadd(acc, __hmul(__float2half(A[r * n + k]), __float2half(B[k * n + c])));
    C[r * n + c] = __half2float(acc);
}
torch::Tensor mm_cuda(torch::Tensor A, torch::Tensor B) {
    int n = A.size(0);
    auto C = torch::empty({n, n}, A.options());
    dim3 block(16, 16), grid((n + 15) / 16, (n + 15) / 16);
    mm_half<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), n);
    return C;
}
"""
ext = load_inline(name="half_ext", cpp_sources="torch::Tensor mm_cuda(torch::Tensor A, torch::Tensor B);", cuda_sources=src, functions=["mm_cuda"])


class ModelNew(nn.Module):
    def forward(self, A, B):
        return ext.mm_cuda(A, B)
