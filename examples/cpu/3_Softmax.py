# problem: 3_Softmax
# expect: ok
# CPU mode, honest: one pass for each row's max, one for the sum of exponentials, one to divide.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <cmath>
torch::Tensor softmax_rows(torch::Tensor x) {
    const int64_t cols = x.size(1), rows = x.size(0);
    auto y = torch::empty_like(x);
    const float* px = x.data_ptr<float>();
    float* py = y.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = px + r * cols;
        float m = row[0];
        for (int64_t c = 1; c < cols; ++c) m = std::max(m, row[c]);
        double sum = 0;
        for (int64_t c = 0; c < cols; ++c) sum += std::exp(row[c] - m);
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t c = 0; c < cols; ++c) py[r * cols + c] = std::exp(row[c] - m) * inv;
    }
    return y;
}
"""
ext = load_inline(name="softmax_rows_cpu", cpp_sources=src, functions=["softmax_rows"], with_cuda=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.softmax_rows(x.contiguous())
