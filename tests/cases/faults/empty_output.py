# problem: 2_ReLU
# expect: incorrect
# expect-runtime: incorrect
# fault: the output has no elements (sized from a wrong dimension): a wrong shape, said so,
# not a traceback of the harness (a CUDA tensor of no bytes has no IPC handle). Its own kernel
# runs (on a scratch tensor), so the legality rule no_own_kernel does not answer first.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
__global__ void touch(float* p) { p[0] = 1.0f; }
torch::Tensor f_cuda(torch::Tensor x) {
  torch::Tensor scratch = torch::empty({1}, x.options());
  touch<<<1, 1>>>(scratch.data_ptr<float>());
  return torch::empty({0}, x.options());
}
"""
ext = load_inline(name="empty_output_ext", cpp_sources="torch::Tensor f_cuda(torch::Tensor x);", cuda_sources=src, functions=["f_cuda"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.f_cuda(x)
