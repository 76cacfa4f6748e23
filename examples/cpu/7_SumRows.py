# problem: 7_SumRows
# expect: ok
# CPU mode, honest: one loop per row, summing in order in fp32. Its rounding differs from torch.sum's
# (which sums in blocks), by up to ~1e-3 on outputs near zero with signed inputs: the
# tolerance follows the problem's numerics, so it passes.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
static int64_t rows_of(const torch::Tensor& x) { return x.size(0); }
torch::Tensor sum_rows(torch::Tensor x) {
    const int64_t rows = rows_of(x), cols = x.size(1);
    auto y = torch::empty({rows}, x.options());
    const float* px = x.data_ptr<float>();
    float* py = y.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        float acc = 0.f;
        for (int64_t c = 0; c < cols; ++c) acc += px[r * cols + c];
        py[r] = acc;
    }
    return y;
}
"""
ext = load_inline(name="sum_rows_seq_ext", cpp_sources=src, functions=["sum_rows"], with_cuda=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.sum_rows(x.contiguous())
