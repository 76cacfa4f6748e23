// Names for the sizes of a generated problem's inputs, as KernelBench spells them: batch_size,
// in_channels, height, width for a convolution's input; M, K and K, N for a product's operands;
// batch_size, dim for a row-wise op. The problem declares them as module globals that
// get_inputs() uses, and the teacher's solutions open with the same names as constexprs of the
// same values, so a model learns to turn a problem's `in_channels = 3` into a C++ constant.
#pragma once

#include "synth/graph.h"

namespace mc::synth {

// Sets GraphInput::dims of every input from the op that first reads it (its family and layout)
// and the dims' ranks. Two inputs share a name where they share the size (the K of a product,
// a loss's two operands); a name another input holds with another value gets the input's name
// appended (dim_x1). Sizes of 1 stay literals.
void name_input_dims(Graph& g);

}  // namespace mc::synth
