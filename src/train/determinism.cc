#include "train/determinism.h"

#include <ATen/Context.h>

#include <cstdlib>

namespace mc::train {

std::string use_deterministic_algorithms() {
  // ":4096:8" is the larger of the two settings cuBLAS documents for reproducible results. A
  // value the caller already exported is kept.
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  auto& ctx = at::globalContext();
  ctx.setDeterministicAlgorithms(true, /*warn_only=*/false);
  ctx.setDeterministicCuDNN(true);
  ctx.setBenchmarkCuDNN(false);
  return std::string("deterministic algorithms (CUBLAS_WORKSPACE_CONFIG=") + std::getenv("CUBLAS_WORKSPACE_CONFIG") + ")";
}

}  // namespace mc::train
