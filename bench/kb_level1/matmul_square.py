# problem: 1_Square_matrix_multiplication_
# expect: ok
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#define TILE 32

// Shared-memory tiled SGEMM: honest, far from cuBLAS (expect a speedup below 1).
__global__ void sgemm_tiled(const float* A, const float* B, float* C, int N) {
    __shared__ float As[TILE][TILE], Bs[TILE][TILE + 1];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int t = 0; t < N; t += TILE) {
        As[threadIdx.y][threadIdx.x] = (row < N && t + threadIdx.x < N) ? A[(int64_t)row * N + t + threadIdx.x] : 0.f;
        Bs[threadIdx.y][threadIdx.x] = (col < N && t + threadIdx.y < N) ? B[(int64_t)(t + threadIdx.y) * N + col] : 0.f;
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < N && col < N) C[(int64_t)row * N + col] = acc;
}

torch::Tensor matmul_cuda(torch::Tensor A, torch::Tensor B) {
    int N = A.size(0);
    auto C = torch::empty({N, N}, A.options());
    dim3 block(TILE, TILE), grid((N + TILE - 1) / TILE, (N + TILE - 1) / TILE);
    sgemm_tiled<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), N);
    return C;
}
"""

mm = load_inline(name="kb_mm_square", cpp_sources="torch::Tensor matmul_cuda(torch::Tensor A, torch::Tensor B);",
                 cuda_sources=cuda_src, functions=["matmul_cuda"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return mm.matmul_cuda(A.contiguous(), B.contiguous())
