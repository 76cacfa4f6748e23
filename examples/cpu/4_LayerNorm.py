# problem: 4_LayerNorm
# expect: ok
# CPU mode, honest: holds its own weight and bias (not `ln.weight` / `ln.bias` as the reference does),
# initialized exactly like nn.LayerNorm. Parameter re-draws reach them by order and shape.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <cmath>
torch::Tensor layernorm(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    auto y = torch::empty_like(x);
    const float *px = x.data_ptr<float>(), *pw = w.data_ptr<float>(), *pb = b.data_ptr<float>();
    float* py = y.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = px + r * cols;
        double mean = 0, var = 0;
        for (int64_t c = 0; c < cols; ++c) mean += row[c];
        mean /= cols;
        for (int64_t c = 0; c < cols; ++c) var += (row[c] - mean) * (row[c] - mean);
        var /= cols;
        const double rstd = 1.0 / std::sqrt(var + eps);
        for (int64_t c = 0; c < cols; ++c)
            py[r * cols + c] = static_cast<float>((row[c] - mean) * rstd) * pw[c] + pb[c];
    }
    return y;
}
"""
ext = load_inline(name="layernorm_own_ext", cpp_sources=src, functions=["layernorm"], with_cuda=False)


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))

    def forward(self, x):
        return ext.layernorm(x.contiguous(), self.weight, self.bias, 1e-5)
