#include "synth/generator.h"

#include <cmath>
#include <set>

#include "common/check.h"
#include "common/hash.h"
#include "common/toml.h"
#include "synth/problem_names.h"

namespace mc::synth {

GeneratorOptions load_generator_options(const std::string& path) {
  toml::table t = read_toml(path, "a TOML weights file");
  GeneratorOptions o;
  auto families = op_families();
  for (auto&& [k, v] : t) {
    std::string key(k.str());
    if (key == "families" || key == "ops") {
      MC_CHECK(v.is_table(), path, ": [", key, "] must be a table");
      for (auto&& [name, w] : *v.as_table()) {
        std::string n(name.str());
        auto val = w.value<double>();
        MC_CHECK(val && *val >= 0, path, ": weight of ", n, " must be a number >= 0");
        if (key == "families") {
          MC_CHECK(std::find(families.begin(), families.end(), n) != families.end(), path, ": unknown family '", n,
                   "' (known: ", [&] { std::string s; for (auto& f : families) s += f + " "; return s; }(), ")");
          o.family_weight[n] = *val;
        } else {
          op(n);  // throws for an unknown op
          o.op_weight[n] = *val;
        }
      }
    } else if (key == "min_elems" || key == "max_elems") {
      auto val = v.value<int64_t>();
      MC_CHECK(val && *val >= 256, path, ": ", key, " must be an integer >= 256");
      (key == "min_elems" ? o.min_elems : o.max_elems) = *val;
    } else {
      throw Error(path + ": unknown key '" + key + "' (expected [families], [ops], min_elems, max_elems)");
    }
  }
  MC_CHECK(o.min_elems <= o.max_elems, path, ": min_elems is larger than max_elems");
  return o;
}

Generator::Generator(GeneratorOptions opts, uint64_t seed) : opts_(std::move(opts)), seed_(seed) {}

double Generator::weight(const OpDef& d) const {
  double w = 1;
  if (auto it = opts_.family_weight.find(d.family); it != opts_.family_weight.end()) w *= it->second;
  if (auto it = opts_.op_weight.find(d.name); it != opts_.op_weight.end()) w *= it->second;
  return w;
}

int64_t Generator::budget(Rng& rng) const {
  double lo = std::log2(static_cast<double>(opts_.min_elems)), hi = std::log2(static_cast<double>(opts_.max_elems));
  return static_cast<int64_t>(std::pow(2.0, uniform(rng, lo, hi)));
}

namespace {

template <typename Pred>
const OpDef* weighted_pick(Rng& rng, const Generator&, Pred ok, const std::function<double(const OpDef&)>& w) {
  std::vector<const OpDef*> cands;
  std::vector<double> ws;
  // Within a family, ops share the family's weight, so a family with many ops does not crowd
  // out the others.
  std::map<std::string, int> per_family;
  for (const auto& [_, d] : op_library())
    if (ok(d)) ++per_family[d.family];
  for (const auto& [_, d] : op_library()) {
    if (!ok(d)) continue;
    double x = w(d) / per_family[d.family];
    if (x <= 0) continue;
    cands.push_back(&d);
    ws.push_back(x);
  }
  if (cands.empty()) return nullptr;
  return cands[std::discrete_distribution<size_t>(ws.begin(), ws.end())(rng)];
}

bool is_compute(const Node& n) { return op(n.op).kind != OpKind::kView && op(n.op).family != "layout"; }

}  // namespace

Graph Generator::make(int level, uint64_t index) const {
  MC_CHECK(level >= 1 && level <= 3, "level must be 1, 2 or 3, got ", level);
  for (int attempt = 0; attempt < 50; ++attempt) {
    // sha256, not std::hash: the same seed gives the same problems on every platform.
    std::string key = std::to_string(seed_) + "/" + std::to_string(level) + "/" + std::to_string(index) + "/" +
                      std::to_string(attempt);
    Rng rng(std::stoull(sha256_hex(key).substr(0, 16), nullptr, 16));
    try {
      Graph g = level == 1 ? level1(rng) : level == 2 ? level2(rng) : level3(rng);
      g.level = level;
      name_problem(g);
      return g;
    } catch (const Error&) {
      continue;  // parameters that do not fit: draw again
    }
  }
  throw Error("could not generate a level-" + std::to_string(level) + " problem (weights exclude every op?)");
}

Graph Generator::level1(Rng& rng) const {
  const OpDef* d = weighted_pick(rng, *this, [](const OpDef& d) { return static_cast<bool>(d.fresh); },
                                 [this](const OpDef& d) { return weight(d); });
  MC_CHECK(d, "no op is enabled for level 1");
  Graph g;
  auto [args, p] = d->fresh(rng, g, budget(rng));
  g.add_node({d->name, args, p});
  return g;
}

int Generator::follow_up(Rng& rng, Graph& g, int cur, const std::vector<std::string>& families) const {
  std::vector<TensorType> in = {g.values[cur]};
  std::map<std::string, nlohmann::json> params;
  std::map<std::string, int> second;
  auto ok = [&](const OpDef& d) {
    if (!d.sample || std::find(families.begin(), families.end(), d.family) == families.end()) return false;
    if (d.arity == 2) {
      // A residual-style second operand: an earlier float value of the same shape.
      for (int v = 0; v < cur; ++v)
        if (g.values[v] == g.values[cur]) {
          auto p = d.sample(rng, {g.values[cur], g.values[v]});
          if (!p) return false;
          params[d.name] = *p;
          second[d.name] = v;
          return true;
        }
      return false;
    }
    if (d.arity != 1) return false;
    auto p = d.sample(rng, in);
    if (!p) return false;
    params[d.name] = *p;
    return true;
  };
  const OpDef* d = weighted_pick(rng, *this, ok, [this](const OpDef& d) { return weight(d); });
  if (!d) return -1;
  std::vector<int> args = {cur};
  if (d->arity == 2) args.push_back(second[d->name]);
  return g.add_node({d->name, args, params[d->name]});
}

Graph Generator::level2(Rng& rng) const {
  const OpDef* anchor = weighted_pick(rng, *this, [](const OpDef& d) { return d.anchor && d.fresh; },
                                      [this](const OpDef& d) { return weight(d); });
  MC_CHECK(anchor, "no anchor op (GEMM, convolution) is enabled for level 2");
  Graph g;
  auto [args, p] = anchor->fresh(rng, g, budget(rng) / 2);
  int cur = g.add_node({anchor->name, args, p});
  int n = static_cast<int>(uniform_int(rng, 1, 5));
  const std::vector<std::string> fam = {"activation", "elementwise", "norm", "softmax", "pool", "reduction"};
  for (int i = 0; i < n; ++i) {
    int next = follow_up(rng, g, cur, fam);
    if (next < 0) break;
    cur = next;
    if (op(g.nodes.back().op).family == "reduction" && coin(rng, 0.5)) break;
  }
  MC_CHECK(g.nodes.size() >= 2, "no follow-up op fits");
  return g;
}

Graph Generator::level3(Rng& rng) const {
  Graph g;
  auto act = [&]() {
    static const std::vector<std::string> acts = {"ReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "LeakyReLU"};
    std::string a = acts[uniform_int(rng, 0, acts.size() - 1)];
    return std::make_pair(a, op(a).sample(rng, {TensorType{{1, 1}}}).value());
  };
  auto dim = [&](std::vector<int64_t> c) { return pick(rng, c); };
  int kind = static_cast<int>(uniform_int(rng, 0, 4));
  if (kind == 0) {  // MLP
    int64_t b = dim({64, 128, 256, 512}), d = dim({256, 512, 1024, 2048});
    int x = add_float_input(g, {b, d});
    int layers = static_cast<int>(uniform_int(rng, 3, 4));
    for (int i = 0; i < layers; ++i) {
      int64_t out = i == layers - 1 ? dim({10, 100, 256, 1000}) : dim({256, 512, 1024, 2048});
      x = g.add_node({"Linear", {x}, {{"out", out}, {"bias", true}}});
      if (i < layers - 1) {
        auto [a, p] = act();
        x = g.add_node({a, {x}, p});
      }
    }
  } else if (kind == 1) {  // pre-norm residual MLP
    int64_t b = dim({8, 16, 32}), s = dim({64, 128, 256}), d = dim({256, 512, 768});
    int x = add_float_input(g, {b, s, d});
    int h = g.add_node({coin(rng, 0.5) ? "LayerNorm" : "RMSNorm", {x}, {{"dims", 1}}});
    h = g.add_node({"Linear", {h}, {{"out", d * dim({2, 4})}, {"bias", true}}});
    auto [a, p] = act();
    h = g.add_node({a, {h}, p});
    h = g.add_node({"Linear", {h}, {{"out", d}, {"bias", true}}});
    g.add_node({"Add", {h, x}, nlohmann::json::object()});
  } else if (kind == 2) {  // multi-head self-attention block
    int64_t b = dim({2, 4, 8}), s = dim({64, 128, 256, 512}), heads = dim({4, 8}), dh = dim({32, 64});
    int64_t e = heads * dh;
    int x = add_float_input(g, {b, s, e});
    auto project_heads = [&](int v) {
      int p = g.add_node({"Linear", {v}, {{"out", e}, {"bias", true}}});
      p = g.add_node({"Reshape", {p}, {{"shape", Shape{b, s, heads, dh}}}});
      return g.add_node({"Permute", {p}, {{"perm", std::vector<int>{0, 2, 1, 3}}}});
    };
    int q = project_heads(x), k = project_heads(x), v = project_heads(x);
    int o = g.add_node({"Attention", {q, k, v}, {{"causal", coin(rng, 0.5)}}});
    o = g.add_node({"Permute", {o}, {{"perm", std::vector<int>{0, 2, 1, 3}}}});
    o = g.add_node({"Reshape", {o}, {{"shape", Shape{b, s, e}}}});
    o = g.add_node({"Linear", {o}, {{"out", e}, {"bias", true}}});
    o = g.add_node({"Add", {o, x}, nlohmann::json::object()});
    g.add_node({"LayerNorm", {o}, {{"dims", 1}}});
  } else if (kind == 3) {  // ResNet basic block
    int64_t n = dim({4, 8, 16}), c = dim({16, 32, 64}), hw = dim({16, 28, 32, 56});
    int x = add_float_input(g, {n, c, hw, hw});
    nlohmann::json conv = {{"out", c}, {"k", 3}, {"stride", 1}, {"pad", 1}, {"bias", false}};
    int h = g.add_node({"Conv2d", {x}, conv});
    h = g.add_node({"BatchNorm", {h}, nlohmann::json::object()});
    h = g.add_node({"ReLU", {h}, nlohmann::json::object()});
    h = g.add_node({"Conv2d", {h}, conv});
    h = g.add_node({"BatchNorm", {h}, nlohmann::json::object()});
    h = g.add_node({"Add", {h, x}, nlohmann::json::object()});
    g.add_node({"ReLU", {h}, nlohmann::json::object()});
  } else {  // conv stack with pooling and a classifier head
    int64_t n = dim({4, 8, 16}), c = dim({3, 8, 16}), hw = dim({32, 48, 64});
    int x = add_float_input(g, {n, c, hw, hw});
    int64_t width = dim({16, 32});
    int h = x;
    for (int i = 0; i < 2; ++i) {
      h = g.add_node({"Conv2d", {h}, {{"out", width}, {"k", 3}, {"stride", 1}, {"pad", 1}, {"bias", true}}});
      auto [a, p] = act();
      h = g.add_node({a, {h}, p});
      h = g.add_node({"MaxPool2d", {h}, {{"k", 2}, {"stride", 2}, {"pad", 0}}});
      width *= 2;
    }
    h = g.add_node({"GlobalAvgPool", {h}, {{"rank", 4}}});
    g.add_node({"Linear", {h}, {{"out", dim({10, 100})}, {"bias", true}}});
  }
  return g;
}

int compute_ops(const Graph& g) {
  int n = 0;
  for (const auto& x : g.nodes) n += is_compute(x);
  return n;
}

Cost graph_cost(const Graph& g) {
  Cost c;
  for (const auto& n : g.nodes) {
    std::vector<TensorType> in;
    for (int a : n.args) in.push_back(g.values[a]);
    Cost x = op(n.op).cost(n.p, in, g.values[n.out]);
    c.flops += x.flops;
    c.bytes += x.bytes;
  }
  return c;
}

double difficulty(const Graph& g) {
  int compute = 0;
  double hard = 0;
  for (const auto& n : g.nodes) {
    if (!is_compute(n)) continue;
    ++compute;
    const OpDef& d = op(n.op);
    if (d.name.starts_with("ConvTranspose")) hard += 0.4;
    else if (d.family == "attention") hard += 0.6;
    else if (d.family == "scan" || d.family == "conv" || d.family == "norm") hard += 0.2;
    if (n.p.value("groups", 1) > 1) hard += 0.2;
  }
  double flops = graph_cost(g).flops;
  double d = g.level + 0.25 * std::max(0, compute - 1) + hard + 0.1 * std::log10(1 + flops / 1e6);
  return std::round(d * 100) / 100;
}

std::string describe(const Graph& g) {
  std::string ops;
  for (const auto& n : g.nodes) {
    if (!is_compute(n)) continue;
    ops += (ops.empty() ? "" : ", ") + n.op;
  }
  std::string in;
  for (const auto& i : g.inputs) in += (in.empty() ? "" : ", ") + shape_str(i.type.shape);
  static const char* kind[] = {"", "Single op", "Fused chain", "Block"};
  return std::string(kind[g.level]) + ": " + ops + " on " + in + ".";
}

}  // namespace mc::synth
