# problem: 5_Matmul
# expect: static_violation library_call
# expect-runtime: illegal library_call
# decoy kernel + cuBLAS: a trivial own kernel, the product from cuBLAS.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cublas_v2.h>
__global__ void touch(float* c) { if (threadIdx.x == 0 && blockIdx.x == 0) c[0] = c[0]; }
torch::Tensor mm_cuda(torch::Tensor A, torch::Tensor B) {
    int n = A.size(0);
    auto C = torch::empty({n, n}, A.options());
    static cublasHandle_t h = nullptr;
    if (!h) cublasCreate(&h);
    cublasSetStream(h, at::cuda::getCurrentCUDAStream());
    float one = 1.f, zero = 0.f;
    // row-major C = A B  <=>  column-major C^T = B^T A^T
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, B.data_ptr<float>(), n,
                A.data_ptr<float>(), n, &zero, C.data_ptr<float>(), n);
    touch<<<1, 32, 0, at::cuda::getCurrentCUDAStream()>>>(C.data_ptr<float>());
    return C;
}
"""
ext = load_inline(name="cublas_ext", cpp_sources="torch::Tensor mm_cuda(torch::Tensor A, torch::Tensor B);",
                  cuda_sources=src, functions=["mm_cuda"], extra_ldflags=["-lcublas"])


class ModelNew(nn.Module):
    def forward(self, A, B):
        return ext.mm_cuda(A, B)
