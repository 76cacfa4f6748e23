// Shared pieces of the teacher's kernels. Row-wise kernels (reductions, scans, softmax, norms,
// losses) run one thread block per "row" of elements reduced together, with the block
// reductions of the prelude a teacher source starts with (teacher_prelude()). Gather-style
// kernels (convolution, pooling, indexing, layout) run one thread per output element.
#pragma once

#include <string>

#include "synth/op_library.h"

namespace mc::synth {

// Elements of a row: rows x len, and the input offset of element r of row `row`.
struct RowIdx {
  Dim rows = 1, len = 1;
  // C++ expression of the element offset, from the names of the row and element variables.
  std::function<std::string(const std::string& row, const std::string& r)> at;
};

// Reduce the dims [d0, d1) of `shape` (the others index the rows, in order).
RowIdx row_idx(const Dims& shape, int d0, int d1);
// Per-channel rows of an [N, C, ...] tensor: every element of channel c (batch norm).
RowIdx channel_rows(const Dims& shape);

// Threads per row block. One size for every shape: a solution's text then does not change with
// its problem's sizes (dim.h), and the kernels loop over rows of any length.
inline constexpr int kRowBlock = 256;

// One thread per output element (grid-stride): `body` reads the coordinates c0, c1, ... of
// output element `o` and ends with STORE(o, value).
Kernel gather_kernel(const Dims& out, const std::string& body);

// The includes and the device helpers that `kernels` calls (warp/block sum, max, min, product,
// argmax/argmin with the first index on ties as torch, an inclusive block scan), with the helpers
// those call: no more. Every helper in every source made the median solution 2,531 tokens
// instead of 1,381 with recipes/small's tokenizer, and a small model learns and samples each one.
std::string teacher_prelude(const std::string& kernels);

}  // namespace mc::synth
