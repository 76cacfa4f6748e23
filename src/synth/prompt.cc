#include "synth/prompt.h"

#include "synth/op_library.h"

namespace mc::synth {

namespace {

std::string tensor_line(const std::string& name, const TensorType& t) {
  return "- `" + name + "`: shape " + shape_str(t.shape) + ", strides " + shape_str(strides_of(t.shape)) +
         " (contiguous), dtype " + (t.dtype == DType::kF32 ? "float32" : "int64") + "\n";
}

std::string program_part(const std::string& problem_source) {
  return "You write CUDA kernels that replace PyTorch programs and run faster.\n\n"
         "Here is the PyTorch program (KernelBench format):\n\n```python\n" +
         problem_source + (problem_source.empty() || problem_source.back() == '\n' ? "" : "\n") + "```\n\n";
}

std::string format_part(const std::string& format, bool with_tables) {
  std::string p;
  if (format == "native") {
    p += "Write a single .cu file (no torch headers) with\n"
         "`extern \"C\" int mc_forward(const mc_tensor* inputs, int n_inputs, mc_tensor* outputs, int n_outputs, "
         "cudaStream_t stream)` from \"musacoder/native_abi.h\": `inputs` holds ";
    p += with_tables ? "the inputs above, then the state_dict tensors in order"
                     : "the tensors of get_inputs(), then the model's state_dict tensors in order";
    p += "; `outputs[0]` is preallocated. Launch every kernel on `stream`; return 0.\n";
  } else {
    p += "Write a Python module defining `class ModelNew(nn.Module)` with the same constructor as `Model`, "
         "whose forward calls your own CUDA kernels built with `torch.utils.cpp_extension.load_inline`. "
         "forward may allocate, view and reshape, but must not compute with PyTorch ops.\n";
  }
  p += "\nBefore the code, reason step by step: (1) the program's semantics, (2) the math of each op, "
       "(3) the shapes of every intermediate, (4) the indexing of each kernel, (5) boundary conditions, "
       "(6) the errors such a kernel is likely to make. Then give the complete solution in one fenced code block.\n";
  return p;
}

}  // namespace

std::string task_prompt(const std::string& problem_source, const std::string& format) {
  return program_part(problem_source) + format_part(format, false);
}

std::string task_prompt(const Graph& g, const std::string& problem_source, const std::string& format) {
  std::string p = program_part(problem_source);
  p += "Inputs:\n";
  for (const auto& in : g.inputs) p += tensor_line(in.name, in.type);
  auto st = g.state();
  if (!st.empty()) {
    p += "Parameters and buffers (state_dict order):\n";
    for (const auto& [node, s] : st)
      p += tensor_line(g.nodes[node].attr + (s.suffix.empty() ? "" : "." + s.suffix), TensorType{s.shape, s.dtype});
  }
  p += "Output:\n" + tensor_line("out", g.values[g.output]) + "\n";
  return p + format_part(format, true);
}

std::string repair_prompt(const std::string& feedback) {
  return "The verifier rejected your solution:\n\n" + feedback +
         "\n\nFind the cause, explain it briefly, and give the complete corrected solution in one fenced code block.\n";
}

std::string as_answer(const std::string& solution, const std::string& format) {
  return "```" + std::string(format == "native" ? "cuda" : "python") + "\n" + solution + "```\n";
}

}  // namespace mc::synth
