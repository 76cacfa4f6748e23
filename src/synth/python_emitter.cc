#include "synth/python_emitter.h"

#include <set>

#include "synth/op_library.h"

namespace mc::synth {

std::string init_body(const Graph& g) {
  std::string s;
  for (const auto& n : g.nodes) {
    if (n.attr.empty()) continue;
    std::vector<TensorType> in;
    for (int a : n.args) in.push_back(g.values[a]);
    s += "        self." + n.attr + " = " + op(n.op).py_init(n.p, in) + "\n";
  }
  return s;
}

std::string init_params(const Graph& g) {
  std::string s = "self";
  for (const auto& a : g.init_args()) s += ", " + a.name + (a.flag ? "=False" : "");
  return s;
}

std::string forward_params(const Graph& g) {
  std::string s = "self";
  for (const auto& in : g.inputs) s += ", " + in.name;
  return s;
}

std::vector<std::string> state_exprs(const Graph& g) {
  std::vector<std::string> out;
  for (const auto& [node, st] : g.state()) {
    std::string e = "self." + g.nodes[node].attr;
    if (!st.suffix.empty()) e += "." + st.suffix;
    out.push_back(e);
  }
  return out;
}

static std::string value_name(const Graph& g, int v) {
  if (v < static_cast<int>(g.inputs.size())) return g.inputs[v].name;
  return "v" + std::to_string(v);
}

static std::string input_expr(const GraphInput& in) {
  std::string shape;
  for (size_t k = 0; k < in.type.shape.size(); ++k) {
    std::string name = input_dim_name(in, k);
    shape += (k ? ", " : "") + (name.empty() ? std::to_string(in.type.shape[k]) : name);
  }
  if (in.type.dtype == DType::kI64)
    return "torch.randint(0, " + std::to_string(in.int_high) + ", (" + shape + (in.type.shape.size() == 1 ? "," : "") + "))";
  if (in.init == "randn") return "torch.randn(" + shape + ")";
  if (in.init == "softmax") return "torch.rand(" + shape + ").softmax(dim=-1)";
  if (in.init == "tril") return "torch.tril(torch.rand(" + shape + "))";
  return "torch.rand(" + shape + ")";
}

std::string problem_source(const Graph& g, const std::string& doc) {
  std::string s = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n";
  s += "class Model(nn.Module):\n    \"\"\"" + doc + "\"\"\"\n\n";
  s += "    def __init__(" + init_params(g) + "):\n        super().__init__()\n" + init_body(g) + "\n";
  s += "    def forward(" + forward_params(g) + "):\n";
  for (const auto& n : g.nodes) {
    std::vector<std::string> args;
    for (int a : n.args) args.push_back(value_name(g, a));
    s += "        " + value_name(g, n.out) + " = " + op(n.op).py_call(n.p, args, "self." + n.attr) + "\n";
  }
  s += "        return " + value_name(g, g.output) + "\n\n\n";
  // The inputs' sizes as module globals, as KernelBench's problems give theirs (batch_size = 16).
  std::set<std::string> defined;
  for (const auto& in : g.inputs)
    for (size_t k = 0; k < in.type.shape.size(); ++k) {
      std::string name = input_dim_name(in, k);
      if (!name.empty() && defined.insert(name).second) s += name + " = " + std::to_string(in.type.shape[k]) + "\n";
    }
  // Then the module arguments that are no input's size (out_channels = 16).
  std::vector<InitArg> init = g.init_args();
  for (const auto& a : init)
    if (a.passed() && !a.size && defined.insert(a.name).second)
      s += a.name + " = " + (a.flag ? std::string("True") : std::to_string(a.value)) + "\n";
  if (!defined.empty()) s += "\n\n";
  s += "def get_inputs():\n    return [";
  for (size_t i = 0; i < g.inputs.size(); ++i) s += (i ? ", " : "") + input_expr(g.inputs[i]);
  s += "]\n\n\ndef get_init_inputs():\n    return [";
  std::string passed;
  for (const auto& a : init)
    if (a.passed()) passed += (passed.empty() ? "" : ", ") + a.name;
  s += passed + "]\n";
  return s;
}

}  // namespace mc::synth
