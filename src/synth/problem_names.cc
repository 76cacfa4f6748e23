#include "synth/problem_names.h"

#include <map>
#include <set>

#include "synth/op_library.h"

namespace mc::synth {
namespace {

using Names = std::vector<std::string>;

// The spatial dims of a [N, C, spatial...] tensor. Never "dim3": that is CUDA's grid type.
Names spatial(size_t n) {
  if (n == 1) return {"length"};
  if (n == 2) return {"height", "width"};
  if (n == 3) return {"depth", "height", "width"};
  Names s;
  for (size_t i = 0; i < n; ++i) s.push_back("dim_" + std::to_string(i + 1));
  return s;
}

// A row-wise op's input: (dim), (batch_size, dim), (batch_size, dim1, dim2), then
// (batch_size, channels, spatial...). A norm's: features where the others have dim or channels.
Names rows(size_t rank, bool norm) {
  std::string second = norm ? "features" : "dim";
  if (rank == 0) return {};
  if (rank == 1) return {second};
  if (rank == 2) return {"batch_size", second};
  if (rank == 3) return norm ? Names{"batch_size", second, "dim1"} : Names{"batch_size", "dim1", "dim2"};
  if (rank == 4 && norm) return {"batch_size", second, "dim1", "dim2"};
  Names s = {"batch_size", norm ? second : "channels"};
  for (auto& x : spatial(rank - 2)) s.push_back(x);
  return s;
}

// The names of argument `arg` (of rank `rank`) of op `d`, or {} to align with argument 0.
Names by_role(const OpDef& d, size_t arg, size_t rank) {
  const std::string& f = d.family;
  const std::string& op = d.name;
  if (f == "conv" || f == "pool") {
    if (rank < 3) return rows(rank, false);
    Names s = {"batch_size", f == "conv" ? "in_channels" : "channels"};
    for (auto& x : spatial(rank - 2)) s.push_back(x);
    return s;
  }
  if (op == "Linear") return {"batch_size", "in_features"};
  if (op == "DiagMatmul") return arg == 0 ? Names{"N"} : Names{"N", "M"};
  if (f == "matmul" && (rank == 2 || rank == 3)) {
    Names s = arg == 0 ? (op == "MatmulTransA" ? Names{"K", "M"} : Names{"M", "K"})
                       : (op == "MatmulTransB" ? Names{"N", "K"} : Names{"K", "N"});
    if (rank == 3) s.insert(s.begin(), "batch_size");
    return s;
  }
  if (f == "attention" && rank == 4) return {"batch_size", "num_heads", "seq_len", "head_dim"};
  if (op == "Embedding") return {"batch_size", "seq_len"};
  if (op == "CrossEntropyLoss") return arg == 0 ? Names{"batch_size", "num_classes"} : Names{"batch_size"};
  if (arg > 0) return {};  // a second operand: the first's names, aligned from the end
  return rows(rank, f == "norm");
}

void name_input_dims(Graph& g) {
  // The first node that reads each input, and at which argument.
  std::map<int, std::pair<const Node*, size_t>> reader;
  for (const auto& n : g.nodes)
    for (size_t a = 0; a < n.args.size(); ++a)
      if (n.args[a] < static_cast<int>(g.inputs.size())) reader.emplace(n.args[a], std::make_pair(&n, a));

  std::map<std::string, int64_t> taken;  // name -> the size it stands for
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    GraphInput& in = g.inputs[i];
    const Shape& s = in.type.shape;
    Names want;
    if (auto r = reader.find(static_cast<int>(i)); r != reader.end()) {
      const Node& n = *r->second.first;
      want = by_role(op(n.op), r->second.second, s.size());
      if (want.empty() && n.args[0] < static_cast<int>(g.inputs.size())) {
        const Names& first = g.inputs[n.args[0]].dims;
        for (size_t k = 0; k < s.size(); ++k) {
          size_t from_end = s.size() - k;
          want.push_back(from_end <= first.size() ? first[first.size() - from_end] : "");
        }
      }
    }
    if (want.size() != s.size()) want = rows(s.size(), false);
    in.dims.assign(s.size(), "");
    for (size_t k = 0; k < s.size(); ++k) {
      if (s[k] == 1) continue;
      std::string name = want[k].empty() ? "dim_" + std::to_string(k) : want[k];
      auto t = taken.find(name);
      if (t != taken.end() && t->second != s[k]) name += "_" + in.name;
      taken.emplace(name, s[k]);
      in.dims[k] = name;
    }
  }
}

// The module arguments op `d` names, as (parameter key, name) in KernelBench's order; "in" is the
// input's channels or features, which is that input's size name.
std::vector<std::pair<std::string, std::string>> module_args(const OpDef& d) {
  if (d.family == "conv")
    return {{"in", "in_channels"}, {"out", "out_channels"}, {"k", "kernel_size"}, {"stride", "stride"}, {"pad", "padding"}, {"bias", "bias"}};
  if (d.family == "pool" && d.name != "GlobalAvgPool") return {{"k", "kernel_size"}, {"stride", "stride"}, {"pad", "padding"}};
  if (d.name == "Linear") return {{"in", "in_features"}, {"out", "out_features"}};
  return {};
}

void name_module_args(Graph& g) {
  std::map<std::string, int64_t> taken;  // every name the problem defines, and its value
  for (const auto& in : g.inputs)
    for (size_t k = 0; k < in.dims.size(); ++k)
      if (!in.dims[k].empty()) taken.emplace(in.dims[k], in.type.shape[k]);
  std::set<std::string> families_named;
  for (auto& n : g.nodes) {
    const OpDef& d = op(n.op);
    auto args = module_args(d);
    if (args.empty() || !families_named.insert(d.family).second) continue;
    nlohmann::json names = nlohmann::json::array();
    for (auto& [key, name] : args) {
      if (key == "in") {
        // The input's channels (features): named when it is a graph input's size of that name.
        int a = n.args.at(0);
        if (a >= static_cast<int>(g.inputs.size())) continue;
        const GraphInput& in = g.inputs[a];
        size_t at = d.family == "conv" ? 1 : in.type.shape.size() - 1;
        if (at < in.dims.size() && in.dims[at] == name) names.push_back({key, name});
        continue;
      }
      if (key == "bias") {  // KernelBench's bias=False default: a switch, passed where True
        if (n.p.contains(key) && n.p[key].is_boolean() && !taken.count(name)) names.push_back({key, name});
        taken.emplace(name, 0);
        continue;
      }
      // Only a single integer (a square kernel), and a stride or padding only where it is set.
      if (!n.p.contains(key) || !n.p[key].is_number_integer()) continue;
      int64_t v = n.p[key].get<int64_t>();
      if ((key == "stride" && v == 1) || (key == "pad" && v == 0)) continue;
      if (auto t = taken.find(name); t != taken.end()) continue;  // a size or an earlier argument
      taken.emplace(name, v);
      names.push_back({key, name});
    }
    if (!names.empty()) n.p["names"] = names;
  }
}

}  // namespace

void name_problem(Graph& g) {
  name_input_dims(g);
  name_module_args(g);
}

}  // namespace mc::synth
