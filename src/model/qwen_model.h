// Qwen2 / Qwen3 dense decoders on libtorch: GQA, RoPE, RMSNorm, SwiGLU, Qwen2's q/k/v biases,
// Qwen3's q/k norms, tied or untied embeddings. The same weights serve training (autograd
// through every op), scoring (per-token log-probs) and generation (prefill and decode over a
// preallocated KV cache). Numerics follow transformers' modeling_qwen2/qwen3 op for op
// (RMSNorm in fp32, RoPE tables in fp32 cast to the model dtype), so outputs match it.
//
// q/k/v and gate/up projections are stored fused (one GEMM each); named_parameters() gives the
// Hugging Face names as views into them, which is what save() writes.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "model/qwen_config.h"

namespace mc::model {

// Several sequences packed back to back into one row of tokens, for training without padding:
// ids [N] and positions [N] (restarting at 0 in each sequence), cu_seqlens [S+1] int32 the
// sequence boundaries (0, len0, len0+len1, ..., N), max_len the longest. Attention never
// crosses a boundary.
struct PackedTokens {
  at::Tensor ids, positions, cu_seqlens;
  int64_t max_len = 0;
};

// Per layer K and V: [slots, kv_heads, max_len, head_dim] each.
struct KvCache {
  std::vector<at::Tensor> k, v;
  int64_t slots = 0, max_len = 0;
};

// Prefill's packed token count n rounded up to a multiple of g, the smallest power of two of at
// least 64 with 16 g > n: at most 1/8 more rows (n > 512), 8 to 16 sizes an octave. Each prefill
// call packs a token count of its own, and a GEMM of a new shape costs the host 0.4-1.3 ms in
// cuBLAS against 22 us for one seen before (the recipe's layer shapes on an H200,
// bench/probes/gemm_shapes.py): ~44 GEMMs a call for an 8-layer model. Padded, the counts
// fall into few sizes, which the library soon knows.
int64_t prefill_bucket(int64_t n);

// Called around each decoder layer of hidden_states_packed (training and its loss evaluation):
// weight sharding (train/weight_shards.h) gathers a layer's weights in before_layer and frees
// them after, and hooks the output to gather them again for backward.
struct LayerHooks {
  virtual ~LayerHooks() = default;
  virtual void before_layer(size_t layer) = 0;
  virtual void after_layer(size_t layer, const at::Tensor& out) = 0;
};

class QwenModel {
 public:
  // Reads dir/config.json and dir/*.safetensors. dtype kUndefined: bf16 on CUDA, fp32 on CPU.
  // Throws mc::Error for a missing file, unsupported architecture, missing tensor or a tensor
  // whose shape does not match the config. On the meta device nothing is read beyond the
  // headers: a check of a folder that costs no memory.
  static QwenModel load(const std::string& dir, c10::Device device, c10::ScalarType dtype = c10::ScalarType::Undefined);
  // A model of that architecture with fresh weights, as transformers initializes one (linear
  // and embedding weights N(0, init_std), biases 0, norms 1), the same for a seed on any device:
  // the start of pretraining from scratch. save() writes it as a Hugging Face directory.
  static QwenModel random(const QwenConfig& cfg, c10::Device device, c10::ScalarType dtype, uint64_t seed,
                          double init_std = 0.02);

  const QwenConfig& config() const { return cfg_; }
  c10::Device device() const { return embed_.device(); }
  c10::ScalarType dtype() const { return embed_.scalar_type(); }

  // ids [B, T] (int64; right padding is harmless: attention is causal) -> logits [B, T, vocab].
  at::Tensor forward(const at::Tensor& ids) const;
  // log p(ids[b, t+1] | ids[b, :t+1]) under softmax(logits / temperature): [B, T-1], fp32.
  // Computed in chunks of positions so the [B, T, vocab] logits never exist at once.
  at::Tensor token_logprobs(const at::Tensor& ids, double temperature = 1.0) const;

  // The last layer's normalized hidden states [B, T, hidden] (before the LM head).
  at::Tensor hidden_states(const at::Tensor& ids) const;
  at::Tensor lm_head(const at::Tensor& hidden) const;
  // The same for packed sequences: [N, hidden]. Attention is variable-length flash attention
  // on CUDA in bf16/fp16 and a block-diagonal causal mask otherwise (same result). With
  // checkpoint_layers, each layer keeps only its input for backward and recomputes the rest
  // (activation checkpointing; identical gradients).
  at::Tensor hidden_states_packed(const PackedTokens& p, bool checkpoint_layers = false) const;

  // --- generation over a KV cache -------------------------------------------------------
  KvCache make_cache(int64_t slots, int64_t max_len) const;
  // Prompts ids [b, L] right-padded, lengths [b]; K/V of row rows[i] are written to cache slot
  // slots[i] (a prompt sampled n times is computed once and written to n slots). Returns the
  // logits of each row's last prompt token [b, vocab]. The rows' real tokens are computed
  // packed, without the padding: variable-length flash attention on CUDA in bf16/fp16, each
  // sequence's causal attention on its own otherwise.
  // With `bucket`, the packed tokens are padded to prefill_bucket(N) rows (see there); the
  // padding is computed and thrown away, and writes nothing to the cache.
  at::Tensor prefill(const at::Tensor& ids, const at::Tensor& lengths, const at::Tensor& rows,
                     const at::Tensor& slots, KvCache& cache, bool bucket = false) const;
  // Prompts that continue what a cache slot already holds (a conversation's next turn): row i's
  // tokens ids[i, :lengths[i]] (right-padded) sit at positions starts[i], starts[i] + 1, ... of
  // slot slots[i], whose positions below starts[i] hold the K/V of the tokens before them. Their
  // K/V are written there, each token attends to its slot's earlier positions and to the row's
  // tokens up to itself. Returns the logits of each row's last token [b, vocab]. Packed as
  // prefill is; on CUDA in bf16/fp16 the keys are each row's slot read back whole.
  at::Tensor prefill_from(const at::Tensor& ids, const at::Tensor& starts, const at::Tensor& lengths,
                          const at::Tensor& slots, KvCache& cache, bool bucket = false) const;
  // One token for each of the first `batch` slots: tokens[i] at position positions[i]
  // (slot i's K/V for earlier positions are in the cache). Attends over the first `span`
  // cache positions (span > every position). Writes logits into out [batch, vocab]. Static
  // shapes and no host synchronisation, so the step can be captured in a CUDA graph.
  // attention: "sdpa" (scaled_dot_product_attention with a mask) or "matmul" (two batched
  // GEMMs around an fp32 softmax); both exact, speed differs by GPU and shape.
  void decode(const at::Tensor& tokens, const at::Tensor& positions, KvCache& cache, int64_t batch,
              int64_t span, at::Tensor& out, const std::string& attention = "matmul") const;

  // --- training and checkpoints ---------------------------------------------------------
  // Hugging Face names -> tensors (views into the fused storage), in the checkpoint's order.
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const;
  // The same names -> the gradients accumulated by backward() (undefined where none).
  std::vector<std::pair<std::string, at::Tensor>> named_gradients() const;
  // The leaves autograd sees (fused tensors).
  std::vector<at::Tensor> parameters() const;
  // The same leaves in the order backward finishes their gradients (LM head and final norm,
  // then the layers from the last, the embedding last), for gradient buckets.
  std::vector<at::Tensor> parameters_in_backward_order() const;
  // Layer i's leaves (a subset of parameters(), in a fixed order).
  std::vector<at::Tensor> layer_parameters(size_t i) const;
  // Not owned; nullptr: none. hidden_states_packed calls them around every layer.
  void set_layer_hooks(LayerHooks* hooks) { hooks_ = hooks; }
  // Whether layer hooks are set: its weights are sharded, so every rank must make as many passes.
  bool has_layer_hooks() const { return hooks_ != nullptr; }
  const at::Tensor& lm_head_weight() const { return lm_head_w_; }
  void set_requires_grad(bool on);
  // Writes config.json (dtype updated) and model.safetensors, or shards of at most
  // max_shard_bytes with model.safetensors.index.json. Readable by transformers unchanged.
  void save(const std::string& dir, c10::ScalarType dtype, int64_t max_shard_bytes = 0) const;

 private:
  struct Layer {
    at::Tensor input_norm, qkv_w, qkv_b, q_norm, k_norm, o_w, o_b, post_norm, gate_up_w, down_w;
    at::Tensor out_proj(const at::Tensor& x) const { return o_b.defined() ? at::linear(x, o_w, o_b) : at::linear(x, o_w); }
  };
  // Builds the layers and RoPE tables from tensors by Hugging Face name and expected shape.
  using TensorSource = std::function<at::Tensor(const std::string& name, std::vector<int64_t> shape)>;
  void assemble(const TensorSource& get, c10::Device device);
  at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w) const;
  // q [.., heads, D], k, v [.., kv_heads, D] with q/k norms and RoPE applied; cos/sin [.., 1, D].
  std::tuple<at::Tensor, at::Tensor, at::Tensor> qkv(const Layer& l, const at::Tensor& x, const at::Tensor& cos,
                                                     const at::Tensor& sin) const;
  at::Tensor mlp(const Layer& l, const at::Tensor& x) const;
  // One decoder layer over packed tokens h [N, hidden]; cos/sin [N, 1, D].
  at::Tensor packed_layer(const Layer& l, const at::Tensor& h, const at::Tensor& cos, const at::Tensor& sin,
                          const PackedTokens& p, const at::Tensor& mask) const;
  // named_parameters() over the tensors get(leaf) returns: the leaves or their gradients.
  template <typename Get>
  std::vector<std::pair<std::string, at::Tensor>> named(Get get) const;
  // Layer i's attention: q [B, heads, T, D], k and v [B, kv_heads, T, D] (norms and RoPE
  // applied) -> [B, heads, T, D]. Where the K/V go and what each query sees is the caller's.
  using Attend = std::function<at::Tensor(size_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v)>;
  // Runs every layer over h [B, T, hidden] at positions [B, T]; the final norm applied.
  at::Tensor run_layers(at::Tensor h, const at::Tensor& positions, const Attend& attend) const;
  // Causal self-attention over the T tokens alone (GQA native).
  at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) const;
  // prefill and prefill_from: row b's tokens ids[b, :lengths[b]] at positions start[b], ... of
  // every slot in write[b] (one slot where start[b] > 0: the one holding the prefix), packed
  // without padding; each token attends to its slot's positions up to its own. Returns each
  // row's last-token logits [b, vocab].
  at::Tensor prefill_rows(const at::Tensor& ids, const std::vector<int64_t>& start, const at::Tensor& lengths,
                          const std::vector<std::vector<int64_t>>& write, KvCache& cache, bool bucket) const;

  QwenConfig cfg_;
  at::Tensor embed_, final_norm_, lm_head_w_;  // lm_head_w_ is embed_ when tied
  std::vector<Layer> layers_;
  at::Tensor rope_cos_, rope_sin_;  // [max_positions, head_dim] fp32
  LayerHooks* hooks_ = nullptr;
};

}  // namespace mc::model
