#include "synth/prompt.h"

#include "common/check.h"
#include "synth/op_library.h"

namespace mc::synth {

namespace {

std::string tensor_line(const std::string& name, const TensorType& t) {
  return "- `" + name + "`: shape " + shape_str(t.shape) + ", strides " + shape_str(strides_of(t.shape)) +
         " (contiguous), dtype " + (t.dtype == DType::kF32 ? "float32" : "int64") + "\n";
}

bool is_musa(const std::string& backend) {
  MC_CHECK(backend == "cuda" || backend == "musa", "task prompt: unknown backend '", backend, "' (cuda or musa)");
  return backend == "musa";
}

std::string program_part(const std::string& problem_source, bool musa) {
  return std::string(musa ? "You write MUSA kernels (Moore Threads GPUs) that replace PyTorch programs and run faster.\n\n"
                          : "You write CUDA kernels that replace PyTorch programs and run faster.\n\n") +
         "Here is the PyTorch program (KernelBench format):\n\n```python\n" +
         problem_source + (problem_source.empty() || problem_source.back() == '\n' ? "" : "\n") + "```\n\n";
}

std::string format_part(const std::string& format, bool with_tables, bool musa) {
  std::string p;
  if (format == "native") {
    p += std::string(musa ? "Write a single .mu file (no torch headers) with\n" : "Write a single .cu file (no torch headers) with\n") +
         "`extern \"C\" int mc_forward(const mc_tensor* inputs, int n_inputs, mc_tensor* outputs, int n_outputs, " +
         (musa ? "musaStream_t" : "cudaStream_t") + " stream)` from \"musacoder/native_abi.h\": `inputs` holds ";
    p += with_tables ? "the inputs above, then the state_dict tensors in order"
                     : "the tensors of get_inputs(), then the model's state_dict tensors in order";
    p += "; `outputs[0]` is preallocated. Launch every kernel on `stream`; return 0.\n";
  } else {
    p += std::string("Write a Python module defining `class ModelNew(nn.Module)` with the same constructor as `Model`, ") +
         (musa ? "whose forward calls your own MUSA kernels built with `torch_musa.utils.musa_extension.load_inline`. "
               : "whose forward calls your own CUDA kernels built with `torch.utils.cpp_extension.load_inline`. ") +
         "forward may allocate, view and reshape, but must not compute with PyTorch ops.\n";
  }
  p += "\nBefore the code, reason step by step: (1) the program's semantics, (2) the math of each op, "
       "(3) the shapes of every intermediate, (4) the indexing of each kernel, (5) boundary conditions, "
       "(6) the errors such a kernel is likely to make. Then give the complete solution in one fenced code block.\n";
  return p;
}

}  // namespace

std::string task_prompt(const std::string& problem_source, const std::string& format, const std::string& backend) {
  const bool musa = is_musa(backend);
  return program_part(problem_source, musa) + format_part(format, false, musa);
}

std::string task_prompt(const Graph& g, const std::string& problem_source, const std::string& format,
                        const std::string& backend) {
  const bool musa = is_musa(backend);
  std::string p = program_part(problem_source, musa);
  p += "Inputs:\n";
  for (const auto& in : g.inputs) p += tensor_line(in.name, in.type);
  auto st = g.state();
  if (!st.empty()) {
    p += "Parameters and buffers (state_dict order):\n";
    for (const auto& [node, s] : st)
      p += tensor_line(g.nodes[node].attr + (s.suffix.empty() ? "" : "." + s.suffix), TensorType{s.shape, s.dtype});
  }
  p += "Output:\n" + tensor_line("out", g.values[g.output]) + "\n";
  return p + format_part(format, true, musa);
}

std::string repair_prompt(const std::string& feedback) {
  return "The verifier rejected your solution:\n\n" + feedback +
         "\n\nFind the cause, explain it briefly, and give the complete corrected solution in one fenced code block.\n";
}

std::string as_answer(const std::string& solution, const std::string& format, const std::string& backend) {
  const std::string fence = format != "native" ? "python" : is_musa(backend) ? "musa" : "cuda";
  return "```" + fence + "\n" + solution + "```\n";
}

}  // namespace mc::synth
