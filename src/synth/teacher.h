// The built-in teacher: lowers an op graph to CUDA, in both solution formats (docs/
// solution-formats.md). Every GEMM, convolution, reduction, norm, scan, loss, index and
// attention op gets its own kernel; chains of elementwise ops that follow a kernel (and read
// nothing computed after it) are fused into its epilogue, and the remaining ones into one
// elementwise kernel per chain. No PyTorch compute in forward: the KernelBench format only
// allocates with torch::empty.
#pragma once

#include <string>

#include "synth/graph.h"

namespace mc::synth {

struct TeacherSolution {
  std::string native_cu;       // extern "C" mc_forward, no torch headers
  std::string kernelbench_py;  // ModelNew + load_inline
  int kernels = 0;             // launches per forward
  int fused_ops = 0;           // elementwise ops folded into another kernel
};

// `module_name` names the load_inline extension (must be unique per problem: use its digest).
TeacherSolution lower_graph(const Graph& g, const std::string& module_name);

}  // namespace mc::synth
