#include "synth/op_library.h"

#include <cmath>
#include <cstdio>
#include <set>

#include "common/check.h"

namespace mc::synth {

int64_t pick(Rng& rng, const std::vector<int64_t>& choices) {
  return choices[std::uniform_int_distribution<size_t>(0, choices.size() - 1)(rng)];
}
int64_t uniform_int(Rng& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}
double uniform(Rng& rng, double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }
bool coin(Rng& rng, double p_true) { return uniform(rng, 0, 1) < p_true; }

const std::map<std::string, OpDef>& op_library() {
  static const std::map<std::string, OpDef> lib = [] {
    std::map<std::string, OpDef> l;
    register_elementwise_ops(l);
    register_reduce_ops(l);
    register_matmul_ops(l);
    register_conv_ops(l);
    register_index_ops(l);
    for (auto& [name, d] : l) {
      MC_INTERNAL_ASSERT(d.name == name && d.infer && d.py_call && d.cost, name);
      MC_INTERNAL_ASSERT(d.kind != OpKind::kElementwise || d.cuda_expr, name);
      MC_INTERNAL_ASSERT(d.kind != OpKind::kKernel || d.lower, name);
    }
    return l;
  }();
  return lib;
}

const OpDef& op(const std::string& name) {
  const auto& lib = op_library();
  auto it = lib.find(name);
  MC_CHECK(it != lib.end(), "unknown op '", name, "'");
  return it->second;
}

std::vector<std::string> op_families() {
  std::set<std::string> f;
  for (const auto& [_, d] : op_library()) f.insert(d.family);
  return {f.begin(), f.end()};
}

std::string call_module(const nlohmann::json&, const std::vector<std::string>& args, const std::string& self_attr) {
  return self_attr + "(" + args.at(0) + ")";
}

static std::string name_of(const nlohmann::json& p, const std::string& key) {
  if (p.contains("names"))
    for (const auto& kv : p["names"])
      if (kv.at(0) == key) return kv.at(1);
  return "";
}

std::string spelled(const nlohmann::json& p, const std::string& key, const std::string& literal) {
  std::string name = name_of(p, key);
  return name.empty() ? literal : name;
}

Dim spelled_dim(const nlohmann::json& p, const std::string& key) {
  std::string name = name_of(p, key);
  int64_t v = p.at(key).get<int64_t>();
  return name.empty() ? Dim(v) : Dim::named(v, name);
}

std::string lit(int64_t v) { return std::to_string(v) + "LL"; }

Shape shape_by(const DimsRule& rule, const nlohmann::json& p, const std::vector<TensorType>& in) {
  std::vector<Dims> d;
  for (const auto& t : in) d.push_back(literal_dims(t.shape));
  return values(rule(p, d));
}

std::string flit(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  std::string s = buf;
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s + "f";
}

std::string dlit(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string py_shape(const Shape& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out;
}

Shape strides_of(const Shape& s) {
  Shape st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

int norm_dim(int64_t dim, size_t rank) {
  int64_t r = static_cast<int64_t>(rank);
  MC_CHECK(dim >= -r && dim < r, "dim ", dim, " is out of range for a tensor of rank ", rank);
  return static_cast<int>(dim < 0 ? dim + r : dim);
}

int add_float_input(Graph& g, Shape shape, const std::string& init) {
  GraphInput in;
  in.type = {std::move(shape), DType::kF32};
  in.init = init;
  return g.add_input(in);
}

int add_int_input(Graph& g, Shape shape, int64_t high) {
  GraphInput in;
  in.type = {std::move(shape), DType::kI64};
  in.int_high = high;
  return g.add_input(in);
}

Shape random_shape(Rng& rng, int rank, int64_t budget, int64_t min_dim) {
  // Split log2(budget) across dims at random, then round each to a "nice" size (multiples of
  // 8 mostly, sometimes odd sizes to exercise boundary handling).
  double total = std::log2(static_cast<double>(std::max<int64_t>(budget, 2)));
  std::vector<double> w(rank);
  double sum = 0;
  for (auto& x : w) sum += (x = uniform(rng, 0.5, 1.5));
  Shape s(rank);
  for (int i = 0; i < rank; ++i) {
    double e = total * w[i] / sum;
    int64_t d = static_cast<int64_t>(std::llround(std::pow(2.0, e)));
    if (coin(rng, 0.75) && d >= 16) d = (d / 8) * 8;
    else if (coin(rng, 0.5)) d += 1;  // odd sizes: boundary conditions
    s[i] = std::max(min_dim, d);
  }
  return s;
}

}  // namespace mc::synth
