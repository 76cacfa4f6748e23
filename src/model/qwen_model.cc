#include "model/qwen_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "common/check.h"
#include "model/device.h"
#include "model/safetensors.h"
#ifdef MUSACODER_CUDA
#include "model/swiglu_kernel.h"
#endif

namespace mc::model {
namespace fs = std::filesystem;
using at::indexing::Slice;

namespace {

c10::ScalarType to_scalar_type(DType t, const std::string& name) {
  switch (t) {
    case DType::kF32: return at::kFloat;
    case DType::kF16: return at::kHalf;
    case DType::kBF16: return at::kBFloat16;
    case DType::kF64: return at::kDouble;
    default: throw Error(str_cat("tensor ", name, " has dtype ", dtype_name(t), "; a model weight must be floating point"));
  }
}

DType to_dtype(c10::ScalarType t) {
  switch (t) {
    case at::kFloat: return DType::kF32;
    case at::kHalf: return DType::kF16;
    case at::kBFloat16: return DType::kBF16;
    case at::kDouble: return DType::kF64;
    default: throw Error(str_cat("cannot save dtype ", c10::toString(t)));
  }
}

const char* hf_dtype_name(c10::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    default: return "float64";
  }
}

std::string shape_str(at::IntArrayRef s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

// Loads one checkpoint tensor onto the device in the model dtype, checking its shape.
class WeightLoader {
 public:
  WeightLoader(const std::string& dir, c10::Device device, c10::ScalarType dtype)
      : ckpt_(dir), dir_(dir), device_(device), dtype_(dtype) {}
  at::Tensor get(const std::string& name, std::vector<int64_t> shape) {
    const TensorView* tv = nullptr;
    try {
      tv = &ckpt_.get(name);
    } catch (const Error&) {
      throw Error(str_cat(dir_, ": checkpoint has no tensor \"", name, "\" (config.json describes a model that needs it)"));
    }
    MC_CHECK(tv->shape == shape, dir_, ": tensor \"", name, "\" has shape ", shape_str(tv->shape),
             " but config.json implies ", shape_str(shape));
    (void)to_scalar_type(tv->dtype, name);  // a dtype we can read
    // The meta device checks a folder without reading its weights (convert --from-gguf does).
    if (device_.is_meta()) return at::empty(shape, at::TensorOptions().device(device_).dtype(dtype_));
    auto cpu = at::from_blob(const_cast<uint8_t*>(tv->data), tv->shape, at::TensorOptions().dtype(to_scalar_type(tv->dtype, name)));
    return cpu.to(device_, dtype_, /*non_blocking=*/false, /*copy=*/true);
  }

 private:
  Checkpoint ckpt_;
  std::string dir_;
  c10::Device device_;
  c10::ScalarType dtype_;
};

at::Tensor rotate_half(const at::Tensor& x) {
  int64_t h = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1);
}

// Activation checkpointing of one layer: the forward runs without a graph and keeps only the
// layer's input; backward runs the layer again with autograd on and differentiates it. The
// recomputation differentiates detached aliases of the parameters (same storage, no hooks):
// their gradients leave through this node's outputs and reach the real leaves once, so
// gradient hooks (the optimizer's bucketed reduction) see each gradient exactly once.
struct LayerRun : torch::CustomClassHolder {
  std::function<at::Tensor(const at::Tensor&, const std::vector<at::Tensor>&)> run;
  std::vector<at::Tensor> params;
};

struct CheckpointedLayer : torch::autograd::Function<CheckpointedLayer> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, c10::intrusive_ptr<LayerRun> layer,
                            at::TensorList params) {
    ctx->save_for_backward({x});
    ctx->saved_data["layer"] = c10::IValue::make_capsule(layer);
    return layer->run(x, layer->params);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grad) {
    auto x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    auto layer = c10::static_intrusive_pointer_cast<LayerRun>(ctx->saved_data["layer"].toCapsule());
    std::vector<at::Tensor> wrt{x};
    for (const auto& p : layer->params) wrt.push_back(p.detach().requires_grad_(true));
    at::Tensor out;
    {
      at::AutoGradMode on(true);
      out = layer->run(x, std::vector<at::Tensor>(wrt.begin() + 1, wrt.end()));
    }
    auto g = torch::autograd::grad({out}, wrt, {grad[0]}, /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
    torch::autograd::variable_list result{g[0], at::Tensor()};
    result.insert(result.end(), g.begin() + 1, g.end());
    return result;
  }
};

#ifdef MUSACODER_CUDA
// silu(gate) * up in one CUDA kernel each way (model/swiglu_kernel.cu), with the math and
// roundings of the ATen ops of the CPU path.
struct SwiGlu : torch::autograd::Function<SwiGlu> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& gate_up) {
    ctx->save_for_backward({gate_up});
    return swiglu_forward_cuda(gate_up);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grad) {
    return {swiglu_backward_cuda(grad[0], ctx->get_saved_variables()[0])};
  }
};
#endif

}  // namespace

QwenModel QwenModel::load(const std::string& dir, c10::Device device, c10::ScalarType dtype) {
  MC_CHECK(fs::is_directory(dir), "model directory ", dir, " does not exist");
  QwenModel m;
  m.cfg_ = QwenConfig::from_file((fs::path(dir) / "config.json").string());
  // generation_config.json may name more EOS ids than config.json (Qwen instruct models stop
  // at both <|im_end|> and <|endoftext|>); generation stops at any of them.
  auto gen_cfg = fs::path(dir) / "generation_config.json";
  if (fs::exists(gen_cfg)) {
    try {
      auto g = QwenConfig::eos_ids(nlohmann::json::parse(std::ifstream(gen_cfg.string())));
      for (int32_t id : g)
        if (std::find(m.cfg_.eos_token_ids.begin(), m.cfg_.eos_token_ids.end(), id) == m.cfg_.eos_token_ids.end())
          m.cfg_.eos_token_ids.push_back(id);
    } catch (const nlohmann::json::exception& e) {
      throw Error(str_cat(gen_cfg.string(), ": not valid JSON: ", e.what()));
    }
  }
  if (dtype == c10::ScalarType::Undefined) dtype = device.is_cuda() ? at::kBFloat16 : at::kFloat;
  WeightLoader w(dir, device, dtype);
  m.assemble([&](const std::string& name, std::vector<int64_t> shape) { return w.get(name, std::move(shape)); }, device);
  return m;
}

QwenModel QwenModel::random(const QwenConfig& cfg, c10::Device device, c10::ScalarType dtype, uint64_t seed,
                            double init_std) {
  QwenModel m;
  m.cfg_ = cfg;
  if (dtype == c10::ScalarType::Undefined) dtype = device.is_cuda() ? at::kBFloat16 : at::kFloat;
  // As transformers' Qwen2/Qwen3 _init_weights: linear and embedding weights N(0, initializer_
  // range), biases 0, RMSNorm weights 1. Drawn on the CPU in fp32 from one seeded generator, in
  // the checkpoint's tensor order, so a seed gives the same model on any device.
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto f32 = at::TensorOptions().dtype(at::kFloat);
  m.assemble(
      [&](const std::string& name, std::vector<int64_t> shape) {
        at::Tensor t;
        const bool norm = name.find("norm.weight") != std::string::npos;
        if (norm) t = at::ones(shape, f32);
        else if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) t = at::zeros(shape, f32);
        else t = at::normal(0.0, init_std, shape, gen, f32);
        return t.to(device, dtype);
      },
      device);
  return m;
}

void QwenModel::assemble(const TensorSource& w_get, c10::Device device) {
  const QwenConfig& c = cfg_;
  int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
  embed_ = w_get("model.embed_tokens.weight", {c.vocab_size, H});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    std::string p = fmt::format("model.layers.{}.", i);
    Layer l;
    l.input_norm = w_get(p + "input_layernorm.weight", {H});
    l.qkv_w = at::cat({w_get(p + "self_attn.q_proj.weight", {c.q_size(), H}),
                       w_get(p + "self_attn.k_proj.weight", {c.kv_size(), H}),
                       w_get(p + "self_attn.v_proj.weight", {c.kv_size(), H})});
    if (c.qkv_bias)
      l.qkv_b = at::cat({w_get(p + "self_attn.q_proj.bias", {c.q_size()}), w_get(p + "self_attn.k_proj.bias", {c.kv_size()}),
                         w_get(p + "self_attn.v_proj.bias", {c.kv_size()})});
    if (c.qk_norm) {
      l.q_norm = w_get(p + "self_attn.q_norm.weight", {D});
      l.k_norm = w_get(p + "self_attn.k_norm.weight", {D});
    }
    l.o_w = w_get(p + "self_attn.o_proj.weight", {H, c.q_size()});
    if (c.o_bias) l.o_b = w_get(p + "self_attn.o_proj.bias", {H});
    l.post_norm = w_get(p + "post_attention_layernorm.weight", {H});
    l.gate_up_w = at::cat({w_get(p + "mlp.gate_proj.weight", {I, H}), w_get(p + "mlp.up_proj.weight", {I, H})});
    l.down_w = w_get(p + "mlp.down_proj.weight", {H, I});
    layers_.push_back(std::move(l));
  }
  final_norm_ = w_get("model.norm.weight", {H});
  // Tied checkpoints may still carry lm_head.weight; transformers ignores it then, so do we.
  lm_head_w_ = c.tie_word_embeddings ? embed_ : w_get("lm_head.weight", {c.vocab_size, H});

  // RoPE tables exactly as transformers builds them: inv_freq in fp32, outer product with the
  // positions, cos/sin of [freqs, freqs].
  auto f32 = at::TensorOptions().dtype(at::kFloat);
  auto inv_freq = 1.0 / at::pow(c.rope_theta, at::arange(0, D, 2, at::TensorOptions().dtype(at::kLong)).to(at::kFloat) / D);
  auto pos = at::arange(c.max_position_embeddings, f32);
  auto freqs = at::outer(pos, inv_freq.to(at::kFloat));
  auto emb = at::cat({freqs, freqs}, -1);
  rope_cos_ = emb.cos().to(device);
  rope_sin_ = emb.sin().to(device);
}

at::Tensor QwenModel::rms_norm(const at::Tensor& x, const at::Tensor& w) const {
  auto xf = x.to(at::kFloat);
  auto var = xf.pow(2).mean(-1, /*keepdim=*/true);
  return w * (xf * at::rsqrt(var + cfg_.rms_norm_eps)).to(x.scalar_type());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> QwenModel::qkv(const Layer& l, const at::Tensor& x, const at::Tensor& cos,
                                                              const at::Tensor& sin) const {
  auto proj = l.qkv_b.defined() ? at::linear(x, l.qkv_w, l.qkv_b) : at::linear(x, l.qkv_w);
  auto parts = proj.split({cfg_.q_size(), cfg_.kv_size(), cfg_.kv_size()}, -1);
  auto lead = x.sizes().slice(0, x.dim() - 1).vec();
  auto heads = [&](const at::Tensor& t, int64_t n) {
    auto shape = lead;
    shape.push_back(n);
    shape.push_back(cfg_.head_dim);
    return t.reshape(shape);
  };
  auto q = heads(parts[0], cfg_.num_heads), k = heads(parts[1], cfg_.num_kv_heads), v = heads(parts[2], cfg_.num_kv_heads);
  if (cfg_.qk_norm) {
    q = rms_norm(q, l.q_norm);
    k = rms_norm(k, l.k_norm);
  }
  q = q * cos + rotate_half(q) * sin;
  k = k * cos + rotate_half(k) * sin;
  return {q, k, v};
}

at::Tensor QwenModel::mlp(const Layer& l, const at::Tensor& x) const {
  auto gu = at::linear(x, l.gate_up_w);
#ifdef MUSACODER_CUDA
  // MUSACODER_UNFUSED_SWIGLU=1 takes the ATen ops instead (tests compare the two on a GPU).
  static const bool fused = !std::getenv("MUSACODER_UNFUSED_SWIGLU");
  if (fused && gu.is_cuda()) return at::linear(SwiGlu::apply(gu.contiguous()), l.down_w);
#endif
  auto parts = gu.chunk(2, -1);
  return at::linear(at::silu(parts[0]) * parts[1], l.down_w);
}

at::Tensor QwenModel::run_layers(at::Tensor h, const at::Tensor& positions, const Attend& attend) const {
  // positions [B, T] -> cos/sin [B, T, 1, D] in the model dtype, as transformers casts them.
  auto cos = rope_cos_.index({positions}).to(h.scalar_type()).unsqueeze(-2);
  auto sin = rope_sin_.index({positions}).to(h.scalar_type()).unsqueeze(-2);
  const int64_t T = h.size(1);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    auto [q, k, v] = qkv(l, rms_norm(h, l.input_norm), cos, sin);
    auto o = attend(i, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2));  // [B, heads, T, D]
    h = h + l.out_proj(o.transpose(1, 2).reshape({h.size(0), T, cfg_.q_size()}));
    h = h + mlp(l, rms_norm(h, l.post_norm));
  }
  return rms_norm(h, final_norm_);
}

at::Tensor QwenModel::causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) const {
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/std::nullopt, /*dropout_p=*/0.0, /*is_causal=*/true,
                                          /*scale=*/std::nullopt, /*enable_gqa=*/cfg_.num_heads != cfg_.num_kv_heads);
}

at::Tensor QwenModel::hidden_states(const at::Tensor& ids) const {
  MC_CHECK(ids.dim() == 2, "token ids must be [batch, length], got ", shape_str(ids.sizes()));
  MC_CHECK(ids.size(1) <= cfg_.max_position_embeddings, "sequence of ", ids.size(1),
           " tokens exceeds max_position_embeddings (", cfg_.max_position_embeddings, ")");
  auto ids_d = ids.to(device(), at::kLong);
  auto positions = at::arange(ids.size(1), ids_d.options()).unsqueeze(0).expand({ids.size(0), ids.size(1)});
  return run_layers(at::embedding(embed_, ids_d), positions,
                    [this](size_t, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
                      return causal_attention(q, k, v);
                    });
}

at::Tensor QwenModel::packed_layer(const Layer& l, const at::Tensor& h, const at::Tensor& cos, const at::Tensor& sin,
                                   const PackedTokens& p, const at::Tensor& mask) const {
  auto [q, k, v] = qkv(l, rms_norm(h, l.input_norm), cos, sin);  // [N, heads, D]
  at::Tensor o;
  if (!mask.defined()) {
    // Variable-length flash attention: sequences are the cu_seqlens ranges, GQA native.
    o = std::get<0>(at::_flash_attention_forward(q, k, v, p.cu_seqlens, p.cu_seqlens, p.max_len, p.max_len, 0.0,
                                                 /*is_causal=*/true, /*return_debug_mask=*/false));
  } else {
    o = at::scaled_dot_product_attention(q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0),
                                         v.transpose(0, 1).unsqueeze(0), mask, 0.0, false, std::nullopt,
                                         /*enable_gqa=*/cfg_.num_heads != cfg_.num_kv_heads)
            .squeeze(0)
            .transpose(0, 1);
  }
  auto x = h + l.out_proj(o.reshape({h.size(0), cfg_.q_size()}));
  return x + mlp(l, rms_norm(x, l.post_norm));
}

at::Tensor QwenModel::hidden_states_packed(const PackedTokens& p, bool checkpoint_layers) const {
  MC_CHECK(p.ids.dim() == 1 && p.positions.sizes() == p.ids.sizes(), "packed ids and positions must both be [N]");
  MC_CHECK(p.max_len <= cfg_.max_position_embeddings, "sequence of ", p.max_len,
           " tokens exceeds max_position_embeddings (", cfg_.max_position_embeddings, ")");
  auto ids = p.ids.to(device(), at::kLong);
  auto pos = p.positions.to(device(), at::kLong);
  PackedTokens dp{ids, pos, p.cu_seqlens.to(device(), at::kInt), p.max_len};
  auto h = at::embedding(embed_, ids);
  auto cos = rope_cos_.index_select(0, pos).to(h.scalar_type()).unsqueeze(1);
  auto sin = rope_sin_.index_select(0, pos).to(h.scalar_type()).unsqueeze(1);
  at::Tensor mask;  // undefined: flash attention
  const bool flash = h.is_cuda() && (h.scalar_type() == at::kBFloat16 || h.scalar_type() == at::kHalf);
  if (!flash) {
    // Block-diagonal causal: token i sees j <= i of its own sequence.
    auto cu = dp.cu_seqlens.to(at::kLong);
    auto seg = at::repeat_interleave(at::arange(cu.size(0) - 1, cu.options()), cu.diff(), std::nullopt, ids.size(0));
    auto idx = at::arange(ids.size(0), cu.options());
    mask = seg.unsqueeze(1).eq(seg.unsqueeze(0)).logical_and_(idx.unsqueeze(1).ge(idx.unsqueeze(0)));
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    if (hooks_) hooks_->before_layer(i);
    if (!checkpoint_layers || !at::GradMode::is_enabled()) {
      h = packed_layer(l, h, cos, sin, dp, mask);
      if (hooks_) hooks_->after_layer(i, h);
      continue;
    }
    // The layer's defined tensors go through the node; the run rebuilds a Layer from them.
    auto run = c10::make_intrusive<LayerRun>();
    std::vector<at::Tensor Layer::*> fields;
    for (auto f : {&Layer::input_norm, &Layer::qkv_w, &Layer::qkv_b, &Layer::q_norm, &Layer::k_norm, &Layer::o_w, &Layer::o_b,
                   &Layer::post_norm, &Layer::gate_up_w, &Layer::down_w})
      if ((l.*f).defined()) {
        fields.push_back(f);
        run->params.push_back(l.*f);
      }
    run->run = [this, fields, cos, sin, dp, mask](const at::Tensor& x, const std::vector<at::Tensor>& ps) {
      Layer copy;
      for (size_t j = 0; j < fields.size(); ++j) copy.*fields[j] = ps[j];
      return packed_layer(copy, x, cos, sin, dp, mask);
    };
    h = CheckpointedLayer::apply(h, run, at::TensorList(run->params));
    if (hooks_) hooks_->after_layer(i, h);
  }
  return rms_norm(h, final_norm_);
}

at::Tensor QwenModel::lm_head(const at::Tensor& hidden) const { return at::linear(hidden, lm_head_w_); }

at::Tensor QwenModel::forward(const at::Tensor& ids) const { return lm_head(hidden_states(ids)); }

at::Tensor QwenModel::token_logprobs(const at::Tensor& ids, double temperature) const {
  MC_CHECK(temperature > 0, "temperature must be > 0 for log-probs, got ", temperature);
  auto h = hidden_states(ids);
  auto targets = ids.to(device(), at::kLong);
  int64_t T = ids.size(1);
  std::vector<at::Tensor> out;
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 24) / (cfg_.vocab_size * ids.size(0)));
  for (int64_t t0 = 0; t0 + 1 < T; t0 += chunk) {
    int64_t n = std::min(chunk, T - 1 - t0);
    auto logits = lm_head(h.narrow(1, t0, n)).to(at::kFloat);
    if (temperature != 1.0) logits = logits / temperature;
    auto lp = at::log_softmax(logits, -1);
    out.push_back(lp.gather(-1, targets.narrow(1, t0 + 1, n).unsqueeze(-1)).squeeze(-1));
  }
  if (out.empty()) return at::zeros({ids.size(0), 0}, h.options().dtype(at::kFloat));
  return at::cat(out, 1);
}

KvCache QwenModel::make_cache(int64_t slots, int64_t max_len) const {
  MC_CHECK(max_len <= cfg_.max_position_embeddings, "KV cache length ", max_len, " exceeds max_position_embeddings (",
           cfg_.max_position_embeddings, ")");
  KvCache c;
  c.slots = slots;
  c.max_len = max_len;
  auto opts = embed_.options().requires_grad(false);
  for (int64_t i = 0; i < cfg_.num_layers; ++i) {
    c.k.push_back(at::zeros({slots, cfg_.num_kv_heads, max_len, cfg_.head_dim}, opts));
    c.v.push_back(at::zeros({slots, cfg_.num_kv_heads, max_len, cfg_.head_dim}, opts));
  }
  return c;
}

int64_t prefill_bucket(int64_t n) {
  int64_t g = 64;
  while (g * 16 <= n) g *= 2;
  return (n + g - 1) / g * g;
}

at::Tensor QwenModel::prefill(const at::Tensor& ids, const at::Tensor& lengths, const at::Tensor& rows,
                              const at::Tensor& slots, KvCache& cache, bool bucket) const {
  MC_CHECK(ids.dim() == 2 && lengths.numel() == ids.size(0) && rows.numel() == slots.numel(),
           "prefill: ids [b, L], b lengths and as many rows as slots, got ids ", shape_str(ids.sizes()), ", ",
           lengths.numel(), " lengths, ", rows.numel(), " rows, ", slots.numel(), " slots");
  auto rw = rows.to(at::kCPU, at::kLong).contiguous(), sl = slots.to(at::kCPU, at::kLong).contiguous();
  std::vector<std::vector<int64_t>> write(ids.size(0));
  for (int64_t j = 0; j < rw.numel(); ++j) {
    const int64_t r = rw.data_ptr<int64_t>()[j];
    MC_CHECK(r >= 0 && r < ids.size(0), "prefill: row ", r, " of ", ids.size(0));
    write[r].push_back(sl.data_ptr<int64_t>()[j]);
  }
  return prefill_rows(ids, std::vector<int64_t>(ids.size(0), 0), lengths, write, cache, bucket);
}

at::Tensor QwenModel::prefill_from(const at::Tensor& ids, const at::Tensor& starts, const at::Tensor& lengths,
                                  const at::Tensor& slots, KvCache& cache, bool bucket) const {
  const int64_t B = ids.size(0);
  MC_CHECK(ids.dim() == 2 && starts.numel() == B && lengths.numel() == B && slots.numel() == B, "prefill_from: ", B,
           " rows need as many starts, lengths and slots");
  auto st = starts.to(at::kCPU, at::kLong).contiguous(), sl = slots.to(at::kCPU, at::kLong).contiguous();
  std::vector<int64_t> start(st.data_ptr<int64_t>(), st.data_ptr<int64_t>() + B);
  std::vector<std::vector<int64_t>> write(B);
  for (int64_t b = 0; b < B; ++b) write[b] = {sl.data_ptr<int64_t>()[b]};
  return prefill_rows(ids, start, lengths, write, cache, bucket);
}

at::Tensor QwenModel::prefill_rows(const at::Tensor& ids, const std::vector<int64_t>& start, const at::Tensor& lengths,
                                   const std::vector<std::vector<int64_t>>& write, KvCache& cache, bool bucket) const {
  const int64_t B = ids.size(0), T = ids.size(1), Hkv = cfg_.num_kv_heads, D = cfg_.head_dim, L = cache.max_len;
  // A profile's names for prefill's parts: the host's index building and copies, then the layers
  // and the last tokens' logits (generate --profile, train rl --profile-step).
  at::RecordFunction prepare(at::RecordScope::USER_SCOPE);
  if (prepare.isActive()) prepare.before("prefill::prepare", c10::ArrayRef<const c10::IValue>{});
  auto ids_h = ids.to(at::kCPU, at::kLong).contiguous();
  auto len = lengths.to(at::kCPU, at::kLong).contiguous();
  const int64_t* lp = len.data_ptr<int64_t>();
  // The rows' real tokens packed end to end [N] (cu: where each row's begin), and the keys each
  // row attends to: its slot's first start[b] positions and its own tokens (cuk).
  std::vector<int64_t> cu(B + 1, 0), cuk(B + 1, 0);
  std::vector<at::Tensor> flat, pos;
  bool continues = false;
  int64_t longest = 0, longest_k = 0;
  for (int64_t b = 0; b < B; ++b) {
    MC_CHECK(lp[b] >= 1 && lp[b] <= T && start[b] >= 0 && start[b] + lp[b] <= L && !write[b].empty() &&
                 (start[b] == 0 || write[b].size() == 1),
             "prefill: row ", b, " (start ", start[b], ", ", lp[b], " of ", T, " tokens, ", write[b].size(),
             " slots) does not fit the KV cache (", L, " positions)");
    for (int64_t s : write[b]) MC_CHECK(s >= 0 && s < cache.slots, "prefill: slot ", s, " of ", cache.slots);
    cu[b + 1] = cu[b] + lp[b];
    cuk[b + 1] = cuk[b] + start[b] + lp[b];
    continues |= start[b] > 0;
    longest = std::max(longest, lp[b]);
    longest_k = std::max(longest_k, start[b] + lp[b]);
    flat.push_back(ids_h[b].narrow(0, 0, lp[b]));
    pos.push_back(at::arange(start[b], start[b] + lp[b], at::kLong));
  }
  const int64_t N = cu[B];
  // With `bucket`, P padding tokens (id 0 at position 0) after the rows: every per-token op runs
  // on N + P rows, attention and the cache writes on the first N only, and the padding's
  // attention output is zero, so it never holds uninitialized memory.
  const int64_t P = bucket ? prefill_bucket(N) - N : 0;
  if (P > 0) {
    flat.push_back(at::zeros({P}, at::kLong));
    pos.push_back(at::zeros({P}, at::kLong));
  }
  // Where each written (slot, kv head, token) goes in the flattened cache [slots * Hkv * L, D],
  // which row of the flattened new K/V [Hkv * (N + P), D] it comes from, and (continuing rows) which
  // cache rows make each row's keys, token-major [cuk[B] * Hkv].
  std::vector<int64_t> dst, src, keys;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t slot : write[b])
      for (int64_t h = 0; h < Hkv; ++h)
        for (int64_t t = 0; t < lp[b]; ++t) {
          dst.push_back((slot * Hkv + h) * L + start[b] + t);
          src.push_back(h * (N + P) + cu[b] + t);
        }
    if (continues)
      for (int64_t t = 0; t < start[b] + lp[b]; ++t)
        for (int64_t h = 0; h < Hkv; ++h) keys.push_back((write[b][0] * Hkv + h) * L + t);
  }
  auto dev = at::TensorOptions().device(device()).dtype(at::kLong);
  // Uploaded without a stream sync each (model::upload): the host goes on to queue the layers.
  auto dst_d = upload(at::tensor(dst), device()), src_d = upload(at::tensor(src), device());
  auto keys_d = continues ? upload(at::tensor(keys), device()) : at::Tensor();
  auto cu_d = upload(at::tensor(cu).to(at::kInt), device()), cuk_d = upload(at::tensor(cuk).to(at::kInt), device());
  auto ids_d = upload(at::cat(flat), device()), pos_d = upload(at::cat(pos), device());
  const bool flash = embed_.is_cuda() && (embed_.scalar_type() == at::kBFloat16 || embed_.scalar_type() == at::kHalf);
  prepare.end();
  RECORD_USER_SCOPE("prefill::layers");
  auto h = run_layers(
      at::embedding(embed_, ids_d).unsqueeze(0), pos_d.unsqueeze(0),
      [&](size_t i, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
        // q [1, heads, N, D], k and v [1, kv_heads, N, D]: written to the cache first, so that a
        // continuing row's keys are read from its slot whole.
        auto kc = cache.k[i].view({-1, D}), vc = cache.v[i].view({-1, D});
        kc.index_copy_(0, dst_d, k[0].reshape({-1, D}).index_select(0, src_d));
        vc.index_copy_(0, dst_d, v[0].reshape({-1, D}).index_select(0, src_d));
        if (flash) {
          // Variable-length flash attention, GQA native; causal aligned to the bottom right, so
          // a row's token t sees its slot's positions up to start + t.
          auto qp = q[0].transpose(0, 1).contiguous();  // [N, heads, D]
          auto kp = continues ? kc.index_select(0, keys_d).view({-1, Hkv, D}) : k[0].transpose(0, 1).contiguous();
          auto vp = continues ? vc.index_select(0, keys_d).view({-1, Hkv, D}) : v[0].transpose(0, 1).contiguous();
          auto o = std::get<0>(at::_flash_attention_forward(qp, kp, vp, cu_d, continues ? cuk_d : cu_d, longest,
                                                           continues ? longest_k : longest, 0.0, /*is_causal=*/true,
                                                           /*return_debug_mask=*/false));
          if (P > 0) o.narrow(0, N, P).zero_();  // rows past cu_d's last range are left unwritten
          return o.transpose(0, 1).unsqueeze(0);
        }
        // Elsewhere (CPU, fp32) row by row: causal over its own tokens, or over its slot's
        // positions with query t seeing those up to start + t.
        std::vector<at::Tensor> o;
        for (int64_t b = 0; b < B; ++b) {
          auto qb = q.narrow(2, cu[b], lp[b]);
          if (start[b] == 0) {
            o.push_back(causal_attention(qb, k.narrow(2, cu[b], lp[b]), v.narrow(2, cu[b], lp[b])));
            continue;
          }
          const int64_t S = start[b] + lp[b];
          auto kb = cache.k[i][write[b][0]].narrow(1, 0, S).unsqueeze(0), vb = cache.v[i][write[b][0]].narrow(1, 0, S).unsqueeze(0);
          auto mask = at::arange(S, dev).unsqueeze(0) <= at::arange(start[b], S, dev).unsqueeze(1);  // [lp, S]
          o.push_back(at::scaled_dot_product_attention(qb, kb, vb, mask, /*dropout_p=*/0.0, /*is_causal=*/false,
                                                       /*scale=*/std::nullopt, /*enable_gqa=*/cfg_.num_heads != Hkv));
        }
        if (P > 0) o.push_back(at::zeros({1, q.size(1), P, D}, q.options()));
        return at::cat(o, 2);
      });
  std::vector<int64_t> last(B);
  for (int64_t b = 0; b < B; ++b) last[b] = cu[b + 1] - 1;
  return lm_head(h[0].index_select(0, upload(at::tensor(last), device())));
}

void QwenModel::decode(const at::Tensor& tokens, const at::Tensor& positions, KvCache& cache, int64_t batch, int64_t span,
                       at::Tensor& out, const std::string& attention) const {
  MC_CHECK(attention == "sdpa" || attention == "matmul", "decode attention must be sdpa or matmul, got ", attention);
  const bool sdpa = attention == "sdpa";
  const int64_t Hkv = cfg_.num_kv_heads, G = cfg_.num_heads / Hkv, D = cfg_.head_dim, L = cache.max_len;
  auto tok = tokens.narrow(0, 0, batch);
  auto pos = positions.narrow(0, 0, batch);
  auto h = at::embedding(embed_, tok);  // [S, hidden]
  auto cos = rope_cos_.index_select(0, pos).to(h.scalar_type()).unsqueeze(1);  // [S, 1, D]
  auto sin = rope_sin_.index_select(0, pos).to(h.scalar_type()).unsqueeze(1);
  // Row of the flattened cache [slots * Hkv * L, D] where each (slot, kv head) writes this step.
  auto slot = at::arange(batch, pos.options());
  auto rows = ((slot.unsqueeze(1) * Hkv + at::arange(Hkv, pos.options()).unsqueeze(0)) * L + pos.unsqueeze(1)).reshape(-1);
  // Slot i sees cache positions <= positions[i].
  auto mask = (at::arange(span, pos.options()).unsqueeze(0) <= pos.unsqueeze(1)).view({batch, 1, 1, span});
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    auto [q, k, v] = qkv(l, rms_norm(h, l.input_norm), cos, sin);  // q [S, Hq, D], k/v [S, Hkv, D]
    cache.k[i].view({-1, D}).index_copy_(0, rows, k.reshape({-1, D}));
    cache.v[i].view({-1, D}).index_copy_(0, rows, v.reshape({-1, D}));
    // GQA without copying the cache: the G query heads sharing a KV head act as G queries.
    auto q4 = q.view({batch, Hkv, G, D});
    auto kc = cache.k[i].narrow(0, 0, batch).narrow(2, 0, span);
    auto vc = cache.v[i].narrow(0, 0, batch).narrow(2, 0, span);
    at::Tensor o;
    if (sdpa) {
      o = at::scaled_dot_product_attention(q4, kc, vc, mask);
    } else {
      auto scores = at::matmul(q4, kc.transpose(-1, -2)).to(at::kFloat) * (1.0 / std::sqrt(static_cast<double>(D)));
      auto probs = at::softmax(scores.masked_fill(mask.logical_not(), -INFINITY), -1).to(q4.scalar_type());
      o = at::matmul(probs, vc);
    }
    h = h + l.out_proj(o.reshape({batch, cfg_.q_size()}));
    h = h + mlp(l, rms_norm(h, l.post_norm));
  }
  h = rms_norm(h, final_norm_);
  at::mm_out(out, h, lm_head_w_.t());
}

template <typename Get>
std::vector<std::pair<std::string, at::Tensor>> QwenModel::named(Get get) const {
  std::vector<std::pair<std::string, at::Tensor>> p;
  const QwenConfig& c = cfg_;
  // Views of a fused tensor in HF's pieces; an undefined tensor (no gradient yet) stays so.
  auto split = [](const at::Tensor& t, std::vector<int64_t> sizes) {
    if (!t.defined()) return std::vector<at::Tensor>(sizes.size());
    return t.split_with_sizes(sizes);
  };
  p.emplace_back("model.embed_tokens.weight", get(embed_));
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    std::string n = fmt::format("model.layers.{}.", i);
    auto qkv_w = split(get(l.qkv_w), {c.q_size(), c.kv_size(), c.kv_size()});
    p.emplace_back(n + "input_layernorm.weight", get(l.input_norm));
    p.emplace_back(n + "self_attn.q_proj.weight", qkv_w[0]);
    p.emplace_back(n + "self_attn.k_proj.weight", qkv_w[1]);
    p.emplace_back(n + "self_attn.v_proj.weight", qkv_w[2]);
    if (l.qkv_b.defined()) {
      auto b = split(get(l.qkv_b), {c.q_size(), c.kv_size(), c.kv_size()});
      p.emplace_back(n + "self_attn.q_proj.bias", b[0]);
      p.emplace_back(n + "self_attn.k_proj.bias", b[1]);
      p.emplace_back(n + "self_attn.v_proj.bias", b[2]);
    }
    if (l.q_norm.defined()) {
      p.emplace_back(n + "self_attn.q_norm.weight", get(l.q_norm));
      p.emplace_back(n + "self_attn.k_norm.weight", get(l.k_norm));
    }
    p.emplace_back(n + "self_attn.o_proj.weight", get(l.o_w));
    if (l.o_b.defined()) p.emplace_back(n + "self_attn.o_proj.bias", get(l.o_b));
    p.emplace_back(n + "post_attention_layernorm.weight", get(l.post_norm));
    auto gu = split(get(l.gate_up_w), {c.intermediate_size, c.intermediate_size});
    p.emplace_back(n + "mlp.gate_proj.weight", gu[0]);
    p.emplace_back(n + "mlp.up_proj.weight", gu[1]);
    p.emplace_back(n + "mlp.down_proj.weight", get(l.down_w));
  }
  p.emplace_back("model.norm.weight", get(final_norm_));
  if (!c.tie_word_embeddings) p.emplace_back("lm_head.weight", get(lm_head_w_));
  return p;
}

std::vector<std::pair<std::string, at::Tensor>> QwenModel::named_parameters() const {
  return named([](const at::Tensor& t) { return t; });
}

std::vector<std::pair<std::string, at::Tensor>> QwenModel::named_gradients() const {
  return named([](const at::Tensor& t) { return t.defined() ? t.grad() : at::Tensor(); });
}

std::vector<at::Tensor> QwenModel::parameters() const {
  std::vector<at::Tensor> p{embed_, final_norm_};
  if (!cfg_.tie_word_embeddings) p.push_back(lm_head_w_);
  for (const Layer& l : layers_)
    for (const auto& t : {l.input_norm, l.qkv_w, l.qkv_b, l.q_norm, l.k_norm, l.o_w, l.o_b, l.post_norm, l.gate_up_w, l.down_w})
      if (t.defined()) p.push_back(t);
  return p;
}

std::vector<at::Tensor> QwenModel::layer_parameters(size_t i) const {
  MC_CHECK(i < layers_.size(), "layer ", i, " of ", layers_.size());
  const Layer& l = layers_[i];
  std::vector<at::Tensor> p;
  for (const auto& t : {l.down_w, l.gate_up_w, l.post_norm, l.o_b, l.o_w, l.k_norm, l.q_norm, l.qkv_b, l.qkv_w, l.input_norm})
    if (t.defined()) p.push_back(t);
  return p;
}

std::vector<at::Tensor> QwenModel::parameters_in_backward_order() const {
  std::vector<at::Tensor> p;
  if (!cfg_.tie_word_embeddings) p.push_back(lm_head_w_);
  p.push_back(final_norm_);
  for (size_t i = layers_.size(); i-- > 0;)
    for (auto& t : layer_parameters(i)) p.push_back(t);
  p.push_back(embed_);
  return p;
}

void QwenModel::set_requires_grad(bool on) {
  for (auto& t : parameters()) t.requires_grad_(on);
}

void QwenModel::save(const std::string& dir, c10::ScalarType dtype, int64_t max_shard_bytes) const {
  fs::create_directories(dir);
  // Host copies in the target dtype, kept alive while the views into them are written.
  std::vector<std::pair<std::string, at::Tensor>> host;
  for (auto& [name, t] : named_parameters())
    host.emplace_back(name, t.detach().to(at::kCPU, dtype).contiguous());
  std::vector<std::vector<TensorView>> shards(1);
  int64_t shard_bytes = 0, total = 0;
  for (auto& [name, t] : host) {
    TensorView v;
    v.name = name;
    v.dtype = to_dtype(dtype);
    v.shape = t.sizes().vec();
    v.data = static_cast<const uint8_t*>(t.data_ptr());
    v.nbytes = t.nbytes();
    if (max_shard_bytes > 0 && shard_bytes > 0 && shard_bytes + static_cast<int64_t>(v.nbytes) > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shard_bytes += v.nbytes;
    total += v.nbytes;
    shards.back().push_back(v);
  }
  std::map<std::string, std::string> meta{{"format", "pt"}};
  // Remove files of an earlier save so a stale index or shard cannot shadow this one.
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors" || e.path().filename() == "model.safetensors.index.json") fs::remove(e.path());
  if (shards.size() == 1) {
    write_safetensors((fs::path(dir) / "model.safetensors").string(), shards[0], meta);
  } else {
    nlohmann::json index{{"metadata", {{"total_size", total}}}, {"weight_map", nlohmann::json::object()}};
    for (size_t s = 0; s < shards.size(); ++s) {
      std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
      write_safetensors((fs::path(dir) / file).string(), shards[s], meta);
      for (const auto& v : shards[s]) index["weight_map"][v.name] = file;
    }
    std::ofstream((fs::path(dir) / "model.safetensors.index.json").string()) << index.dump(2) << "\n";
  }
  nlohmann::json config = cfg_.raw;
  config["dtype"] = hf_dtype_name(dtype);
  if (config.contains("torch_dtype")) config["torch_dtype"] = hf_dtype_name(dtype);
  std::ofstream((fs::path(dir) / "config.json").string()) << config.dump(2) << "\n";
}

}  // namespace mc::model
