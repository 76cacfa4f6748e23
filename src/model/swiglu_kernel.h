// The MLP's gate: silu(gate) * up, over the fused [.., 2I] output of the gate/up projection, in
// one kernel each way (CUDA). Bitwise equal to the unfused ATen ops it replaces
// (at::silu(g) * u and their autograd backward): the same float math and the same rounding to
// the tensor's dtype after each op. Two fewer passes over [tokens, I] forward and four
// backward; the MLP's elementwise traffic dominates a small model's step outside the GEMMs.
#pragma once

#include <ATen/ATen.h>

namespace mc::model {

at::Tensor swiglu_forward_cuda(const at::Tensor& gate_up);                          // [.., 2I] -> [.., I]
at::Tensor swiglu_backward_cuda(const at::Tensor& grad, const at::Tensor& gate_up);  // -> [.., 2I]

}  // namespace mc::model
