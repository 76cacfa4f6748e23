// KernelBench's own prompt, so that a model evaluated here sees what KernelBench's harness
// would show it: the "one_shot" option of backend "cuda" in KernelBench's prompts.toml
// (ScalingIntelligence/KernelBench at 423217d, src/kernelbench/prompts/): the problem
// statement, the one-shot example (model_ex_add.py -> model_new_ex_add.py), the reference
// architecture, the precision note and the instruction, composed as its
// prompt_constructor_toml.render_prompt_by_option does. The template text is KernelBench's
// (MIT licence); tests/python/test_bench.py checks the rendering against KernelBench's own
// constructor when a checkout is at hand.
#pragma once

#include <string>

namespace mc::synth {

// The name this prompt goes by in reports.
inline constexpr const char* kKernelBenchPromptName = "KernelBench one_shot/cuda (prompts.toml @ 423217d)";

// The one-shot example: the input architecture and its solution.
struct KernelBenchExample {
  std::string arch, new_arch;
};

// backend: cuda (KernelBench's own example) | musa (the same example through `musacoder port`'s
// built-in rules: `.musa()`, musaStream_t, torch_musa's load_inline). Throws mc::Error for another.
KernelBenchExample kernelbench_example(const std::string& backend = "cuda");

// precision: fp32 | fp16 | bf16; backend as above. For musa, the template's "CUDA operators"
// reads "MUSA operators" and the example is the ported one (KernelBench has no MUSA prompt; this
// is ours). Throws mc::Error for another precision or backend.
std::string kernelbench_prompt(const std::string& ref_arch_src, const std::string& precision = "fp32",
                               const std::string& backend = "cuda");

}  // namespace mc::synth
