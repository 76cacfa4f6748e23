#include "synth/kernelbench_prompt.h"

#include <map>

#include "common/check.h"
#include "port/porter.h"

namespace mc::synth {
namespace {

// KernelBench's template strings, as TOML parses them (a multi-line string drops the newline
// right after its opening quotes).
const char* const kProblemStatement = R"KB(You write custom {backend_display} to replace the pytorch operators in the given architecture to get speedups.

You have complete freedom to choose the set of operators you want to replace. You may make the decision to replace some operators with custom {backend_display} and leave others unchanged. You may replace multiple operators with custom implementations, consider operator fusion opportunities (combining multiple operators into a single kernel, for example, combining matmul+relu), or algorithmic changes (such as online softmax). You are only limited by your imagination.
)KB";
const char* const kInstruction = R"KB(Optimize the architecture named Model with custom {backend_display}! Name your optimized output architecture ModelNew. Output the new code in codeblocks. Please generate real code, NOT pseudocode, make sure the code compiles and is fully functional. Just output the new model code, no other text, and NO testing code!
)KB";
const char* const kExamplesBlock = R"KB({examples_intro}

{examples_entries}
)KB";
const char* const kExampleIntroOneShot = R"KB(Here's an example to show you the syntax of inline embedding custom {backend_display} in PyTorch:
)KB";
const char* const kExampleEntry = R"KB({example_label}

Input architecture:

{input_code}

Optimized with {backend_display}:

{output_code}
)KB";
const char* const kArchBlock = R"KB(You are given the following architecture:


{ref_arch_src}

)KB";
const char* const kPrecisionNote = R"KB(Note: The kernels should be optimized for {precision_display} precision.
)KB";
const char* const kExampleArch = R"KB(import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a, b):
        return a + b


def get_inputs():
    # randomly generate input tensors based on the model architecture
    a = torch.randn(1, 128).cuda()
    b = torch.randn(1, 128).cuda()
    return [a, b]


def get_init_inputs():
    # randomly generate tensors required for initialization based on the model architecture
    return []
)KB";
const char* const kExampleNewArch = R"KB(import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

# Define the custom CUDA kernel for element-wise addition
elementwise_add_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void elementwise_add_kernel(const float* a, const float* b, float* out, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        out[idx] = a[idx] + b[idx];
    }
}

torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b) {
    auto size = a.numel();
    auto out = torch::zeros_like(a);

    const int block_size = 256;
    const int num_blocks = (size + block_size - 1) / block_size;

    elementwise_add_kernel<<<num_blocks, block_size>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), size);

    return out;
}
"""

elementwise_add_cpp_source = (
    "torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b);"
)

# Compile the inline CUDA code for element-wise addition
elementwise_add = load_inline(
    name="elementwise_add",
    cpp_sources=elementwise_add_cpp_source,
    cuda_sources=elementwise_add_source,
    functions=["elementwise_add_cuda"],
    verbose=True,
    extra_cflags=[""],
    extra_ldflags=[""],
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.elementwise_add = elementwise_add

    def forward(self, a, b):
        return self.elementwise_add.elementwise_add_cuda(a, b)
)KB";

std::string strip(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// Python's str.format with named fields, one pass: substituted values are not scanned again.
std::string format(const std::string& tmpl, const std::map<std::string, std::string>& ctx) {
  std::string out;
  for (size_t i = 0; i < tmpl.size(); ++i) {
    if (tmpl[i] == '{') {
      size_t end = tmpl.find('}', i);
      MC_CHECK(end != std::string::npos, "kernelbench prompt: unclosed field in template");
      auto it = ctx.find(tmpl.substr(i + 1, end - i - 1));
      MC_CHECK(it != ctx.end(), "kernelbench prompt: no value for {", tmpl.substr(i + 1, end - i - 1), "}");
      out += it->second;
      i = end;
    } else {
      out += tmpl[i];
    }
  }
  return out;
}

// PromptConfig.compose_blocks of one key.
std::string block(const char* tmpl) { return strip(tmpl) + "\n"; }

}  // namespace

KernelBenchExample kernelbench_example(const std::string& backend) {
  if (backend == "cuda") return {kExampleArch, kExampleNewArch};
  MC_CHECK(backend == "musa", "kernelbench prompt: unknown backend '", backend, "' (cuda or musa)");
  static const KernelBenchExample musa = [] {
    const port::RuleTable table = port::load_rules();  // the Porter reads it: it must outlive it
    port::Porter porter(table, port::Direction::kToMusa);
    return KernelBenchExample{porter.port(kExampleArch).text, porter.port(kExampleNewArch).text};
  }();
  return musa;
}

std::string kernelbench_prompt(const std::string& ref_arch_src, const std::string& precision,
                               const std::string& backend) {
  static const std::map<std::string, std::string> kPrecision = {
      {"fp32", "FP32 (32-bit floating point)"}, {"fp16", "FP16 (16-bit floating point)"}, {"bf16", "BF16 (bfloat16)"}};
  auto prec = kPrecision.find(precision);
  MC_CHECK(prec != kPrecision.end(), "kernelbench prompt: unknown precision '", precision, "' (fp32, fp16 or bf16)");
  const KernelBenchExample example = kernelbench_example(backend);
  const std::string operators = backend == "musa" ? "MUSA operators" : "CUDA operators";
  const std::map<std::string, std::string> display = {{"backend_display", operators}};
  std::string entry = format(strip(block(kExampleEntry)), {{"example_label", "Example:"},
                                                           {"input_code", example.arch},
                                                           {"output_code", example.new_arch},
                                                           {"backend_display", operators}});
  std::map<std::string, std::string> ctx = {
      {"ref_arch_src", ref_arch_src},
      {"precision_display", prec->second},
      {"examples_intro", format(strip(block(kExampleIntroOneShot)), display)},
      {"examples_entries", strip(entry)},
  };
  // options.one_shot: problem_statement, examples_block, arch_block, precision_note, instruction.
  std::string text = format(kProblemStatement, display) + "\n" + block(kExamplesBlock) + "\n" + block(kArchBlock) + "\n" +
                     block(kPrecisionNote) + "\n" + format(kInstruction, display);
  return strip(format(strip(text) + "\n", ctx)) + "\n";
}

}  // namespace mc::synth
