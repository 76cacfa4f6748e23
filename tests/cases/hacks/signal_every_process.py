# problem: 2_ReLU
# expect: static_violation process_access
# expect-runtime: reject
# process access: a raw kill(-1) from the extension (SIGCONT here: harmless, but SIGKILL as root
# would end every process on the machine). The sandbox refuses it, and the refusal fails the load.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>
__global__ void relu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
}
torch::Tensor relu_cuda(torch::Tensor x) {
    TORCH_CHECK(syscall(SYS_kill, -1, SIGCONT) == 0, "kill(-1) was refused");
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
ext = load_inline(name="signal_ext", cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);", cuda_sources=src, functions=["relu_cuda"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_cuda(x)
