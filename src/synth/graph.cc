#include "synth/graph.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "common/check.h"
#include "synth/op_library.h"

namespace mc::synth {

std::string input_dim_name(const GraphInput& in, size_t k) {
  if (!in.dims.empty()) return in.dims.at(k);
  std::string name = in.name;
  for (auto& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return name + "_" + std::to_string(k);
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int Graph::add_input(GraphInput in) {
  MC_CHECK(nodes.empty(), "graph inputs must be added before nodes");
  if (in.name.empty()) in.name = "x" + std::to_string(inputs.size());
  values.push_back(in.type);
  inputs.push_back(std::move(in));
  return static_cast<int>(values.size()) - 1;
}

int Graph::add_node(Node n) {
  const OpDef& d = op(n.op);
  MC_CHECK(static_cast<int>(n.args.size()) == d.arity, "op ", n.op, " takes ", d.arity,
           " tensor argument(s), got ", n.args.size());
  std::vector<TensorType> in;
  for (int a : n.args) {
    MC_CHECK(a >= 0 && a < static_cast<int>(values.size()), "op ", n.op, ": no value ", a);
    in.push_back(values[a]);
  }
  TensorType out = d.infer(n.p, in);
  for (auto dim : out.shape) MC_CHECK(dim > 0, "op ", n.op, " gives an empty shape ", shape_str(out.shape));
  if (d.py_init && !d.py_init(n.p, in).empty() && n.attr.empty()) {
    std::string base;
    for (char c : n.op) base += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    n.attr = base + std::to_string(nodes.size());
  }
  values.push_back(out);
  n.out = static_cast<int>(values.size()) - 1;
  nodes.push_back(std::move(n));
  output = nodes.back().out;
  return output;
}

std::string Graph::title() const {
  std::string t;
  for (const auto& n : nodes) {
    if (op(n.op).family == "layout") continue;
    t += (t.empty() ? "" : "_") + n.op;
  }
  return t.empty() ? "Identity" : t;
}

std::vector<std::string> Graph::families() const {
  std::set<std::string> f;
  for (const auto& n : nodes) f.insert(op(n.op).family);
  return {f.begin(), f.end()};
}

std::vector<std::pair<int, StateTensor>> Graph::state() const {
  // PyTorch's state_dict order: the model's own parameters (bare nn.Parameter attributes) in
  // registration order first, then each submodule's parameters and buffers.
  std::vector<std::pair<int, StateTensor>> own, modules;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto& n = nodes[i];
    const OpDef& d = op(n.op);
    if (!d.state) continue;
    std::vector<TensorType> in;
    for (int a : n.args) in.push_back(values[a]);
    for (auto& s : d.state(n.p, in)) (s.suffix.empty() ? own : modules).emplace_back(static_cast<int>(i), s);
  }
  own.insert(own.end(), modules.begin(), modules.end());
  return own;
}

std::vector<InitArg> Graph::init_args() const {
  std::vector<InitArg> out;
  std::set<std::string> seen;
  for (const auto& n : nodes) {
    if (!n.p.contains("names")) continue;
    for (const auto& kv : n.p["names"]) {
      std::string key = kv.at(0), name = kv.at(1);
      if (!seen.insert(name).second) continue;
      if (key == "in") out.push_back({name, 0, true});
      else if (n.p.at(key).is_boolean()) out.push_back({name, n.p[key].get<bool>() ? 1 : 0, false, true});
      else out.push_back({name, n.p.at(key).get<int64_t>()});
    }
  }
  // Switches last: Python's defaulted parameters follow the others.
  std::stable_partition(out.begin(), out.end(), [](const InitArg& a) { return !a.flag; });
  return out;
}

std::vector<int> Graph::uses() const {
  std::vector<int> u(values.size(), 0);
  for (const auto& n : nodes)
    for (int a : n.args) ++u[a];
  if (output >= 0) ++u[output];
  return u;
}

nlohmann::json Graph::to_json() const {
  auto type_json = [](const TensorType& t) {
    return nlohmann::json{{"shape", t.shape}, {"dtype", t.dtype == DType::kF32 ? "float32" : "int64"}};
  };
  nlohmann::json j = {{"level", level}, {"output", output}};
  for (const auto& in : inputs) {
    auto e = type_json(in.type);
    e["name"] = in.name;
    if (in.type.dtype == DType::kI64) e["high"] = in.int_high;
    else e["init"] = in.init;
    j["inputs"].push_back(e);
  }
  for (const auto& n : nodes)
    j["nodes"].push_back({{"op", n.op}, {"args", n.args}, {"p", n.p}, {"out", n.out},
                          {"type", type_json(values[n.out])}});
  j["state"] = nlohmann::json::array();
  for (const auto& [node, s] : state()) j["state"].push_back(nodes[node].attr + (s.suffix.empty() ? "" : "." + s.suffix));
  return j;
}

}  // namespace mc::synth
