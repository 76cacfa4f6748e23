#include "model/qwen_config.h"

#include <fstream>

#include "common/check.h"

namespace mc::model {
namespace {

int64_t positive_int(const nlohmann::json& j, const char* key, const std::string& origin) {
  MC_CHECK(j.contains(key), origin, ": missing \"", key, "\"");
  MC_CHECK(j[key].is_number_integer() && j[key].get<int64_t>() > 0, origin, ": \"", key,
           "\" must be a positive integer, got ", j[key].dump());
  return j[key].get<int64_t>();
}

}  // namespace

QwenConfig QwenConfig::from_file(const std::string& path) {
  std::ifstream in(path);
  MC_CHECK(in, "cannot read ", path, " (a model directory needs config.json)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw Error(str_cat(path, ": not JSON: ", e.what()));
  }
  return from_json(j, path);
}

QwenConfig QwenConfig::from_json(const nlohmann::json& j, const std::string& origin) {
  MC_CHECK(j.is_object(), origin, ": expected a JSON object");
  QwenConfig c;
  c.raw = j;
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty())
    arch = j["architectures"][0].get<std::string>();
  else if (j.value("model_type", "") == "qwen2")
    arch = "Qwen2ForCausalLM";
  else if (j.value("model_type", "") == "qwen3")
    arch = "Qwen3ForCausalLM";
  MC_CHECK(arch == "Qwen2ForCausalLM" || arch == "Qwen3ForCausalLM", origin, ": unsupported architecture \"",
           arch.empty() ? j.value("model_type", "") : arch,
           "\" (supported: Qwen2ForCausalLM, Qwen3ForCausalLM)");
  c.architecture = arch;
  bool qwen3 = arch == "Qwen3ForCausalLM";

  c.vocab_size = positive_int(j, "vocab_size", origin);
  c.hidden_size = positive_int(j, "hidden_size", origin);
  c.intermediate_size = positive_int(j, "intermediate_size", origin);
  c.num_layers = positive_int(j, "num_hidden_layers", origin);
  c.num_heads = positive_int(j, "num_attention_heads", origin);
  c.num_kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                       ? positive_int(j, "num_key_value_heads", origin)
                       : c.num_heads;
  MC_CHECK(c.num_heads % c.num_kv_heads == 0, origin, ": num_attention_heads (", c.num_heads,
           ") must be a multiple of num_key_value_heads (", c.num_kv_heads, ")");
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    c.head_dim = positive_int(j, "head_dim", origin);
  } else {
    MC_CHECK(c.hidden_size % c.num_heads == 0, origin, ": hidden_size (", c.hidden_size,
             ") is not a multiple of num_attention_heads (", c.num_heads, ") and no head_dim is given");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  MC_CHECK(c.head_dim % 2 == 0, origin, ": head_dim must be even for RoPE, got ", c.head_dim);
  c.max_position_embeddings = j.contains("max_position_embeddings")
                                  ? positive_int(j, "max_position_embeddings", origin)
                                  : 32768;
  c.rms_norm_eps = j.value("rms_norm_eps", 1e-6);
  c.tie_word_embeddings = j.value("tie_word_embeddings", false);
  c.qkv_bias = qwen3 ? j.value("attention_bias", false) : true;
  c.o_bias = qwen3 && c.qkv_bias;
  c.qk_norm = qwen3;
  MC_CHECK(j.value("hidden_act", std::string("silu")) == "silu", origin, ": unsupported hidden_act \"",
           j.value("hidden_act", std::string()), "\" (only silu)");
  MC_CHECK(!j.value("use_sliding_window", false), origin,
           ": use_sliding_window is not supported (every layer uses full attention)");

  // transformers >= 5 writes rope_parameters {rope_theta, rope_type}; older files rope_theta and
  // rope_scaling at the top level.
  std::string rope_type = "default";
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const auto& rp = j["rope_parameters"];
    c.rope_theta = rp.value("rope_theta", 10000.0);
    rope_type = rp.value("rope_type", std::string("default"));
  } else {
    c.rope_theta = j.value("rope_theta", 10000.0);
    if (j.contains("rope_scaling") && j["rope_scaling"].is_object())
      rope_type = j["rope_scaling"].value("rope_type", j["rope_scaling"].value("type", std::string("?")));
  }
  MC_CHECK(rope_type == "default", origin, ": unsupported RoPE scaling \"", rope_type, "\" (only the default)");

  if (j.contains("dtype") && j["dtype"].is_string()) c.dtype = j["dtype"];
  else if (j.contains("torch_dtype") && j["torch_dtype"].is_string()) c.dtype = j["torch_dtype"];
  c.eos_token_ids = eos_ids(j);
  return c;
}

std::vector<int32_t> QwenConfig::eos_ids(const nlohmann::json& j) {
  std::vector<int32_t> ids;
  if (!j.is_object() || !j.contains("eos_token_id")) return ids;
  const auto& e = j["eos_token_id"];
  if (e.is_number_integer()) ids.push_back(e.get<int32_t>());
  else if (e.is_array())
    for (const auto& x : e)
      if (x.is_number_integer()) ids.push_back(x.get<int32_t>());
  return ids;
}

}  // namespace mc::model
