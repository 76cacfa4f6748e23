// Stage 1: turn a raw model answer (markdown, reasoning, code fences) into one source file.
#pragma once

#include <string>

namespace mc::eval {

enum class SolutionFormat {
  kKernelBench,  // Python with `class ModelNew`, kernels via load_inline
  kNative,       // CUDA source with an extern "C" mc_forward entry (include/musacoder/native_abi.h)
};
const char* to_string(SolutionFormat f);

struct Extraction {
  bool ok = false;
  SolutionFormat format = SolutionFormat::kKernelBench;
  std::string code;   // the extracted source when ok
  std::string error;  // why nothing usable was found, when !ok
};

// Accepts plain source or markdown. Drops <think>...</think> blocks; picks the last fenced
// block that holds `class ModelNew` or `mc_forward` (an unterminated last fence, from a
// truncated answer, counts up to the end of the text).
Extraction extract_solution(const std::string& answer);

}  // namespace mc::eval
