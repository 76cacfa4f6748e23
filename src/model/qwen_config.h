// The architecture of a Qwen2 / Qwen3 dense decoder as a Hugging Face config.json describes it.
// Parsed without libtorch, so tools that only inspect checkpoints need none.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mc::model {

struct QwenConfig {
  std::string architecture;  // "Qwen2ForCausalLM" | "Qwen3ForCausalLM"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // Qwen2: always; Qwen3: config.attention_bias
  bool o_bias = false;    // Qwen3 with attention_bias (Qwen2's o_proj never has one)
  bool qk_norm = false;   // Qwen3: RMSNorm over each head of q and k before RoPE
  std::string dtype;      // the checkpoint's declared dtype ("bfloat16", "float32", ...), may be ""
  std::vector<int32_t> eos_token_ids;
  nlohmann::json raw;     // the file as read, written back when a checkpoint is saved

  // Throws mc::Error naming the file and the missing, invalid or unsupported field.
  static QwenConfig from_file(const std::string& path);
  static QwenConfig from_json(const nlohmann::json& j, const std::string& origin = "config.json");

  // eos_token_id of a config or generation config: an id, a list of ids, or absent.
  static std::vector<int32_t> eos_ids(const nlohmann::json& j);

  int64_t q_size() const { return num_heads * head_dim; }
  int64_t kv_size() const { return num_kv_heads * head_dim; }
};

}  // namespace mc::model
