// Deterministic training (--deterministic): the same data, seed and machine give the same
// weights bit for bit. On the H100 two SFT runs of the small recipe from one checkpoint, data
// and seed passed 13% and 0.1% of the same RL problems: the GPU's atomics
// (flash attention's backward, cuBLAS split-K reductions) reorder float sums from run to run,
// and the differences grow over hundreds of steps. This asks libtorch for its deterministic
// kernels: flash attention's backward without atomics, cuBLAS with a fixed workspace
// (CUBLAS_WORKSPACE_CONFIG, read when its handle is created, so call this before any CUDA
// work), cuDNN without autotuning; an operation that has no deterministic kernel then throws
// instead of running.
#pragma once

#include <string>

namespace mc::train {

// Returns a one-line description of what was set, for the run's log.
std::string use_deterministic_algorithms();

}  // namespace mc::train
