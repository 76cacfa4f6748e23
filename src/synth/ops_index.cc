// Indexing (gather, index_select, embedding), layout (permute, reshape) and attention.
#include <cmath>

#include "common/check.h"
#include "synth/kernel_helpers.h"
#include "synth/op_library.h"

namespace mc::synth {
namespace {

Cost move_cost(const nlohmann::json&, const std::vector<TensorType>&, const TensorType& out) {
  return {0, 8.0 * numel(out.shape)};
}

OpDef base(const char* name, const char* family, int arity) {
  OpDef d;
  d.name = name;
  d.family = family;
  d.kind = OpKind::kKernel;
  d.arity = arity;
  d.cost = move_cost;
  d.sample = [](Rng&, const std::vector<TensorType>&) -> std::optional<nlohmann::json> { return std::nullopt; };
  return d;
}

void add_gather(std::map<std::string, OpDef>& lib) {
  OpDef d = base("Gather", "index", 2);
  d.fresh = [](Rng& rng, Graph& g, int64_t budget) {
    Shape s = random_shape(rng, 2, budget, 16);
    int dim = static_cast<int>(uniform_int(rng, 0, 1));
    Shape is = s;
    is[dim] = std::max<int64_t>(1, s[dim] / pick(rng, {1, 2, 4}));
    int x = add_float_input(g, s), idx = add_int_input(g, is, s[dim]);
    return std::make_pair(std::vector<int>{x, idx}, nlohmann::json{{"dim", dim}});
  };
  d.infer_dims = [](const nlohmann::json&, const std::vector<Dims>& in) { return in[1]; };
  d.infer = [rule = d.infer_dims](const nlohmann::json& p, const std::vector<TensorType>& in) {
    MC_CHECK(in[0].dtype == DType::kF32 && in[1].dtype == DType::kI64 && in[0].shape.size() == in[1].shape.size(),
             "Gather needs a float tensor and an int64 index of the same rank");
    norm_dim(p.at("dim").get<int64_t>(), in[0].shape.size());
    return TensorType{shape_by(rule, p, in), DType::kF32};
  };
  d.py_call = [](const nlohmann::json& p, const std::vector<std::string>& a, const std::string&) {
    return "torch.gather(" + a[0] + ", " + std::to_string(p.at("dim").get<int>()) + ", " + a[1] + ")";
  };
  d.lower = [](const LowerCtx& c) {
    int dim = c.n.p.at("dim").get<int>();
    Dims xs = strides_of(c.in_d[0]);
    std::string off;
    for (size_t i = 0; i < xs.size(); ++i)
      off += (i ? " + " : "") + (static_cast<int>(i) == dim ? std::string("a1[o]") : "c" + std::to_string(i)) + " * " + lit(xs[i]);
    return gather_kernel(c.out_d, "    STORE(o, a0[" + off + "]);\n");
  };
  lib[d.name] = d;
}

void add_index_select(std::map<std::string, OpDef>& lib) {
  OpDef d = base("IndexSelect", "index", 2);
  d.fresh = [](Rng& rng, Graph& g, int64_t budget) {
    Shape s = random_shape(rng, 2, budget, 16);
    int dim = static_cast<int>(uniform_int(rng, 0, 1));
    int x = add_float_input(g, s), idx = add_int_input(g, {std::max<int64_t>(2, s[dim] / 2)}, s[dim]);
    return std::make_pair(std::vector<int>{x, idx}, nlohmann::json{{"dim", dim}});
  };
  d.infer_dims = [](const nlohmann::json& p, const std::vector<Dims>& in) {
    Dims s = in[0];
    s[norm_dim(p.at("dim").get<int64_t>(), s.size())] = in[1][0];
    return s;
  };
  d.infer = [rule = d.infer_dims](const nlohmann::json& p, const std::vector<TensorType>& in) {
    MC_CHECK(in[0].dtype == DType::kF32 && in[1].dtype == DType::kI64 && in[1].shape.size() == 1,
             "IndexSelect needs a float tensor and a 1-D int64 index");
    return TensorType{shape_by(rule, p, in), DType::kF32};
  };
  d.py_call = [](const nlohmann::json& p, const std::vector<std::string>& a, const std::string&) {
    return "torch.index_select(" + a[0] + ", " + std::to_string(p.at("dim").get<int>()) + ", " + a[1] + ")";
  };
  d.lower = [](const LowerCtx& c) {
    int dim = c.n.p.at("dim").get<int>();
    Dims xs = strides_of(c.in_d[0]);
    std::string off;
    for (size_t i = 0; i < xs.size(); ++i) {
      std::string ci = "c" + std::to_string(i);
      off += (i ? " + " : "") + (static_cast<int>(i) == dim ? "a1[" + ci + "]" : ci) + " * " + lit(xs[i]);
    }
    return gather_kernel(c.out_d, "    STORE(o, a0[" + off + "]);\n");
  };
  lib[d.name] = d;
}

void add_embedding(std::map<std::string, OpDef>& lib) {
  OpDef d = base("Embedding", "index", 1);
  d.fresh = [](Rng& rng, Graph& g, int64_t budget) {
    int64_t dim = pick(rng, {64, 128, 256, 512}), vocab = pick(rng, {1000, 4096, 10000, 32000});
    Shape s = random_shape(rng, 2, std::max<int64_t>(budget / dim, 16), 4);
    int idx = add_int_input(g, s, vocab);
    return std::make_pair(std::vector<int>{idx}, nlohmann::json{{"vocab", vocab}, {"dim", dim}});
  };
  // num_embeddings and embedding_dim stay the literals of nn.Embedding(vocab, dim).
  d.infer_dims = [](const nlohmann::json& p, const std::vector<Dims>& in) {
    Dims s = in[0];
    s.push_back(p.at("dim").get<int64_t>());
    return s;
  };
  d.infer = [rule = d.infer_dims](const nlohmann::json& p, const std::vector<TensorType>& in) {
    MC_CHECK(in[0].dtype == DType::kI64, "Embedding needs int64 indices");
    return TensorType{shape_by(rule, p, in), DType::kF32};
  };
  d.state_dims = [](const nlohmann::json& p, const std::vector<Dims>&) {
    return std::vector<Dims>{{p.at("vocab").get<int64_t>(), p.at("dim").get<int64_t>()}};
  };
  d.state = [](const nlohmann::json& p, const std::vector<TensorType>&) {
    return std::vector<StateTensor>{{"weight", {p.at("vocab").get<int64_t>(), p.at("dim").get<int64_t>()}}};
  };
  d.py_init = [](const nlohmann::json& p, const std::vector<TensorType>&) {
    return "nn.Embedding(" + std::to_string(p.at("vocab").get<int64_t>()) + ", " + std::to_string(p.at("dim").get<int64_t>()) + ")";
  };
  d.py_call = call_module;
  d.lower = [](const LowerCtx& c) {
    Dim dim = c.out_d.back();
    return gather_kernel(c.out_d, "    STORE(o, s0[a0[o / " + lit(dim) + "] * " + lit(dim) + " + o % " + lit(dim) + "]);\n");
  };
  lib[d.name] = d;
}

void add_permute(std::map<std::string, OpDef>& lib) {
  OpDef d = base("Permute", "layout", 1);
  d.sample = [](Rng& rng, const std::vector<TensorType>& in) -> std::optional<nlohmann::json> {
    size_t r = in[0].shape.size();
    if (r < 2 || in[0].dtype != DType::kF32) return std::nullopt;
    std::vector<int> perm(r);
    for (size_t i = 0; i < r; ++i) perm[i] = static_cast<int>(i);
    std::swap(perm[r - 1], perm[r - 2]);
    return nlohmann::json{{"perm", perm}};
  };
  d.infer_dims = [](const nlohmann::json& p, const std::vector<Dims>& in) {
    Dims s;
    for (int i : p.at("perm").get<std::vector<int>>()) s.push_back(in[0].at(i));
    return s;
  };
  d.infer = [rule = d.infer_dims](const nlohmann::json& p, const std::vector<TensorType>& in) {
    auto perm = p.at("perm").get<std::vector<int>>();
    MC_CHECK(perm.size() == in[0].shape.size(), "Permute: ", perm.size(), " dims for a rank-", in[0].shape.size(), " tensor");
    return TensorType{shape_by(rule, p, in), in[0].dtype};
  };
  d.py_call = [](const nlohmann::json& p, const std::vector<std::string>& a, const std::string&) {
    std::string s;
    for (int i : p.at("perm").get<std::vector<int>>()) s += (s.empty() ? "" : ", ") + std::to_string(i);
    return a[0] + ".permute(" + s + ")";
  };
  d.lower = [](const LowerCtx& c) {
    auto perm = c.n.p.at("perm").get<std::vector<int>>();
    Dims xs = strides_of(c.in_d[0]);
    std::string off;
    for (size_t i = 0; i < perm.size(); ++i) off += (i ? " + " : "") + std::string("c") + std::to_string(i) + " * " + lit(xs[perm[i]]);
    return gather_kernel(c.out_d, "    STORE(o, a0[" + off + "]);\n");
  };
  lib[d.name] = d;
}

void add_reshape(std::map<std::string, OpDef>& lib) {
  OpDef d = base("Reshape", "layout", 1);
  d.kind = OpKind::kView;
  d.infer = [](const nlohmann::json& p, const std::vector<TensorType>& in) {
    Shape s = p.at("shape").get<Shape>();
    MC_CHECK(numel(s) == numel(in[0].shape), "Reshape ", shape_str(in[0].shape), " to ", shape_str(s));
    return TensorType{s, in[0].dtype};
  };
  d.py_call = [](const nlohmann::json& p, const std::vector<std::string>& a, const std::string&) {
    return a[0] + ".reshape(" + py_shape(p.at("shape").get<Shape>()) + ")";
  };
  d.cost = [](const nlohmann::json&, const std::vector<TensorType>&, const TensorType&) { return Cost{}; };
  lib[d.name] = d;
}

// F.scaled_dot_product_attention(q, k, v[, is_causal]) on [B, H, S, D]: a block per query row
// keeps the row's scores in shared memory.
void add_attention(std::map<std::string, OpDef>& lib) {
  OpDef d = base("Attention", "attention", 3);
  d.anchor = false;
  d.fresh = [](Rng& rng, Graph& g, int64_t budget) {
    int64_t dh = pick(rng, {32, 64, 64, 128}), h = pick(rng, {4, 8, 16});
    int64_t s = std::clamp<int64_t>(static_cast<int64_t>(std::sqrt(static_cast<double>(budget) / (h * dh)) * 8), 64, 1024);
    s = s / 16 * 16;
    int64_t b = std::max<int64_t>(1, std::min<int64_t>(16, budget / (h * s * dh)));
    Shape sh = {b, h, s, dh};
    int q = add_float_input(g, sh), k = add_float_input(g, sh), v = add_float_input(g, sh);
    return std::make_pair(std::vector<int>{q, k, v}, nlohmann::json{{"causal", coin(rng, 0.4)}});
  };
  d.infer = [](const nlohmann::json&, const std::vector<TensorType>& in) {
    MC_CHECK(in[0].shape.size() == 4 && in[0] == in[1] && in[1] == in[2] && in[0].dtype == DType::kF32,
             "Attention needs float q, k, v of one [B, H, S, D] shape");
    MC_CHECK(in[0].shape[2] <= 8192, "Attention: sequence longer than 8192");
    return in[0];
  };
  d.py_call = [](const nlohmann::json& p, const std::vector<std::string>& a, const std::string&) {
    return "F.scaled_dot_product_attention(" + a[0] + ", " + a[1] + ", " + a[2] +
           (p.value("causal", false) ? ", is_causal=True" : "") + ")";
  };
  d.cost = [](const nlohmann::json&, const std::vector<TensorType>& in, const TensorType&) {
    const Shape& s = in[0].shape;
    return Cost{4.0 * s[0] * s[1] * s[2] * s[2] * s[3], 16.0 * numel(s)};
  };
  d.lower = [](const LowerCtx& c) {
    const Dims& s = c.in_d[0];
    Dim S = s[2], D = s[3];
    // Scores kept in double in shared memory (S * 8 bytes).
    bool causal = c.n.p.value("causal", false);
    std::string lim = causal ? "(i + 1)" : lit(S);
    std::string b = "  extern __shared__ double sc[];\n";
    b += "  const long long row = blockIdx.x, i = row % " + lit(S) + ", head = row / " + lit(S) + ";\n";
    b += "  const float* q = a0 + row * " + lit(D) + ";\n";
    b += "  const float* k = a1 + head * " + lit(S * D) + ";\n  const float* v = a2 + head * " + lit(S * D) + ";\n";
    b += "  const double scale = 1.0 / sqrt(" + dbl(D) + ");\n";
    b += "  double m = -INFINITY;\n";
    b += "  for (long long j = threadIdx.x; j < " + lim + "; j += blockDim.x) {\n";
    b += "    double dot = 0.0;\n    for (int d = 0; d < " + lit(D) + "; ++d) dot += (double)q[d] * k[j * " + lit(D) + " + d];\n";
    b += "    sc[j] = dot * scale;\n    m = fmax(m, sc[j]);\n  }\n";
    b += "  m = mc_block_reduce(m, McMax(), (double)-INFINITY);\n  double sum = 0.0;\n";
    b += "  for (long long j = threadIdx.x; j < " + lim + "; j += blockDim.x) { sc[j] = exp(sc[j] - m); sum += sc[j]; }\n";
    b += "  sum = mc_block_sum(sum);\n  const double inv = 1.0 / sum;\n";
    b += "  for (int d = threadIdx.x; d < " + lit(D) + "; d += blockDim.x) {\n";
    b += "    double acc = 0.0;\n    for (long long j = 0; j < " + lim + "; ++j) acc += sc[j] * v[j * " + lit(D) + " + d];\n";
    b += "    STORE(row * " + lit(D) + " + d, acc * inv);\n  }\n";
    Kernel k;
    k.body = b;
    k.grid = (s[0] * s[1] * S).bare();
    k.block = 128;
    k.smem = (S * 8).bare();
    return k;
  };
  lib[d.name] = d;
}

}  // namespace

void register_index_ops(std::map<std::string, OpDef>& lib) {
  add_gather(lib);
  add_index_select(lib);
  add_embedding(lib);
  add_permute(lib);
  add_reshape(lib);
  add_attention(lib);
}

}  // namespace mc::synth
