// The names a generated problem gives its numbers, as KernelBench spells them.
//
// Sizes: batch_size, in_channels, height, width for a convolution's input; M, K and K, N for a
// product's operands; batch_size, dim for a row-wise op. The problem declares them as module
// globals that get_inputs() uses. Module arguments: out_channels, kernel_size, stride, padding
// of a convolution or pooling, out_features of a linear layer, and a convolution's bias as
// KernelBench's defaulted switch (bias=False; KernelBench's convolutions mostly have none).
// The problem declares them as globals too, and its Model takes them in its constructor
// (in_channels, out_channels, kernel_size), which get_init_inputs() passes, as KernelBench's
// problems do. The teacher's
// solutions open with the same names as constexprs of the same values, and their ModelNew takes
// the same constructor arguments, so a model learns to turn a problem's `in_channels = 3` into a
// C++ constant and to keep Model's constructor.
#pragma once

#include "synth/graph.h"

namespace mc::synth {

// Sets GraphInput::dims of every input from the op that first reads it (its family and layout)
// and the dims' ranks. Two inputs share a name where they share the size (the K of a product,
// a loss's two operands); a name another input holds with another value gets the input's name
// appended (dim_x1). Sizes of 1 stay literals. Then names the module arguments of the first
// convolution, pooling or linear layer (Node::p["names"]; Graph::init_args) where the name is
// free; other nodes keep literals.
void name_problem(Graph& g);

}  // namespace mc::synth
