# problem: 7_SumRows
# expect: incorrect
# Twin of honest_sum_sequential: the same loop, but the accumulator is rounded to half
# precision's 11 significant bits after every addition. Must still be rejected.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <cstring>
inline float keep_11_bits(float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    b = (b + 0x1000u) & 0xFFFFE000u;  // round to 10 stored mantissa bits
    std::memcpy(&v, &b, 4);
    return v;
}
torch::Tensor sum_rows(torch::Tensor x) {
    const int64_t rows = x.size(0), cols = x.size(1);
    auto y = torch::empty({rows}, x.options());
    const float* px = x.data_ptr<float>();
    float* py = y.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        float acc = 0.f;
        for (int64_t c = 0; c < cols; ++c) acc = keep_11_bits(acc + px[r * cols + c]);
        py[r] = acc;
    }
    return y;
}
"""
ext = load_inline(name="sum_rows_half_ext", cpp_sources=src, functions=["sum_rows"], with_cuda=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.sum_rows(x.contiguous())
