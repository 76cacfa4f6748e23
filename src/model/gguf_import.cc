#include "model/gguf_import.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/check.h"
#include "common/fs.h"
#include "common/hash.h"
#include "model/gguf.h"
#include "model/gguf_quants.h"
#include "model/qwen_config.h"

namespace mc::model {
namespace {

using nlohmann::json;

// The pre-tokenizer regexes llama.cpp names in tokenizer.ggml.pre, as the models' own
// tokenizer.json files spell them.
const char* const kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// llama.cpp's token types (enum llama_token_type).
enum TokenType { kNormal = 1, kControl = 3, kUserDefined = 4 };

// A float32 metadata value written as the shortest decimal that reads back as the same float
// (9.999999974752427e-07 -> 1e-06), as the model's own config.json has it.
double short_float(const json& v) {
  const float f = v.get<float>();
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, f);
  return std::stod(std::string(buf, r.ptr));
}

int64_t meta_int(const GgufFile& g, const std::string& key) {
  const json& v = g.get(key);
  MC_CHECK(v.is_number_integer() && v.get<int64_t>() > 0, g.path(), ": ", key, " must be a positive integer, got ",
           v.dump());
  return v.get<int64_t>();
}

json config_json(const GgufFile& g, const std::string& arch, int64_t vocab, bool tied, bool qkv_bias, DType dtype) {
  const std::string p = arch + ".";
  const bool q3 = arch == "qwen3";
  json c = {{"architectures", {q3 ? "Qwen3ForCausalLM" : "Qwen2ForCausalLM"}},
            {"model_type", arch},
            {"vocab_size", vocab},
            {"hidden_size", meta_int(g, p + "embedding_length")},
            {"intermediate_size", meta_int(g, p + "feed_forward_length")},
            {"num_hidden_layers", meta_int(g, p + "block_count")},
            {"num_attention_heads", meta_int(g, p + "attention.head_count")},
            {"num_key_value_heads", g.has(p + "attention.head_count_kv") ? meta_int(g, p + "attention.head_count_kv")
                                                                         : meta_int(g, p + "attention.head_count")},
            {"max_position_embeddings", g.has(p + "context_length") ? meta_int(g, p + "context_length") : 32768},
            {"rope_theta", g.has(p + "rope.freq_base") ? short_float(g.get(p + "rope.freq_base")) : 10000.0},
            {"rms_norm_eps", short_float(g.get(p + "attention.layer_norm_rms_epsilon"))},
            {"hidden_act", "silu"},
            {"tie_word_embeddings", tied},
            {"use_sliding_window", false},
            {"use_cache", true},
            {"attention_dropout", 0.0},
            {"initializer_range", 0.02},
            {"dtype", dtype == DType::kBF16 ? "bfloat16" : "float32"},
            // The transformers version whose config format this follows (the project pins it).
            // Without one, transformers suspects a Mistral tokenizer and warns of a wrong regex.
            {"transformers_version", "5.17.0"}};
  if (g.has(p + "attention.key_length")) c["head_dim"] = meta_int(g, p + "attention.key_length");
  if (q3) c["attention_bias"] = qkv_bias;
  if (g.has(p + "rope.scaling.type")) {
    const std::string t = g.get(p + "rope.scaling.type").get<std::string>();
    MC_CHECK(t == "none", g.path(), ": RoPE scaling \"", t,
             "\" is not supported (the model stack runs the default RoPE only)");
  }
  for (const char* k : {"bos_token_id", "eos_token_id", "padding_token_id"}) {
    const std::string key = std::string("tokenizer.ggml.") + k;
    if (g.has(key)) c[std::string(k) == "padding_token_id" ? "pad_token_id" : k] = g.get(key);
  }
  return c;
}

// The Hugging Face name of a GGUF tensor of a qwen2 / qwen3 model, "" if it has none.
std::string hf_name(const std::string& n) {
  static const std::map<std::string, std::string> kTop = {{"token_embd.weight", "model.embed_tokens.weight"},
                                                          {"output_norm.weight", "model.norm.weight"},
                                                          {"output.weight", "lm_head.weight"}};
  if (auto it = kTop.find(n); it != kTop.end()) return it->second;
  static const std::map<std::string, std::string> kBlock = {
      {"attn_norm.weight", "input_layernorm.weight"},      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},        {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.weight", "self_attn.k_proj.weight"},        {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.weight", "self_attn.v_proj.weight"},        {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_output.weight", "self_attn.o_proj.weight"},   {"attn_output.bias", "self_attn.o_proj.bias"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},   {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},         {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"}};
  if (n.rfind("blk.", 0) != 0) return "";
  const size_t dot = n.find('.', 4);
  if (dot == std::string::npos) return "";
  const std::string layer = n.substr(4, dot - 4);
  if (layer.empty() || layer.find_first_not_of("0123456789") != std::string::npos) return "";
  auto it = kBlock.find(n.substr(dot + 1));
  return it == kBlock.end() ? "" : "model.layers." + layer + "." + it->second;
}

std::string supported_types() {
  std::string s;
  for (uint32_t t = 0; t < 64; ++t)
    if (const auto* i = ggml_type_info(t)) s += (s.empty() ? "" : ", ") + std::string(i->name);
  return s;
}

// tokenizer.json and the added-token list of tokenizer_config.json, from the GGUF vocabulary.
struct Tokenizer {
  json tokenizer;
  json added_decoder = json::object();
};

Tokenizer tokenizer_json(const GgufFile& g) {
  const std::string model = g.get("tokenizer.ggml.model").get<std::string>();
  MC_CHECK(model == "gpt2", g.path(), ": tokenizer.ggml.model \"", model,
           "\" is not supported (only byte-level BPE, \"gpt2\", which Qwen models use)");
  const json& tokens = g.get("tokenizer.ggml.tokens");
  const json& merges = g.get("tokenizer.ggml.merges");
  MC_CHECK(tokens.is_array() && merges.is_array(), g.path(), ": tokenizer.ggml.tokens and merges must be arrays");
  json types = g.has("tokenizer.ggml.token_type") ? g.get("tokenizer.ggml.token_type") : json::array();
  MC_CHECK(types.empty() || types.size() == tokens.size(), g.path(), ": tokenizer.ggml.token_type has ", types.size(),
           " entries for ", tokens.size(), " tokens");
  const std::string pre = g.has("tokenizer.ggml.pre") ? g.get("tokenizer.ggml.pre").get<std::string>() : "default";

  // Every token keeps its id in the vocabulary (the [PADn] fillers llama.cpp adds up to the
  // embedding's rows too, so that any id a model samples decodes); control and user-defined
  // tokens are also added tokens, matched before BPE, special when control.
  Tokenizer t;
  json vocab = json::object(), added = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& text = tokens[i].get_ref<const std::string&>();
    const int type = types.empty() ? kNormal : types[i].get<int>();
    MC_CHECK(!vocab.contains(text), g.path(), ": token \"", text, "\" appears twice in tokenizer.ggml.tokens");
    vocab[text] = i;
    if (type == kControl || type == kUserDefined) {
      json a = {{"id", i},         {"content", text}, {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", type == kControl}};
      added.push_back(a);
      json d = a;
      d.erase("id");
      t.added_decoder[std::to_string(i)] = d;
    }
  }
  json merge_pairs = json::array();
  for (const auto& m : merges) {
    const std::string& s = m.get_ref<const std::string&>();
    const size_t sp = s.find(' ');
    MC_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < s.size(), g.path(), ": malformed merge \"", s, "\"");
    merge_pairs.push_back({s.substr(0, sp), s.substr(sp + 1)});
  }
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  json pre_tokenizer, normalizer;
  if (pre == "qwen2") {
    normalizer = {{"type", "NFC"}};
    pre_tokenizer = {{"type", "Sequence"},
                     {"pretokenizers",
                      {{{"type", "Split"}, {"pattern", {{"Regex", kQwen2Split}}}, {"behavior", "Isolated"}, {"invert", false}},
                       byte_level}}};
  } else if (pre == "default" || pre == "gpt-2" || pre == "gpt2") {
    pre_tokenizer = byte_level;
    pre_tokenizer["use_regex"] = true;
  } else {
    throw Error(str_cat(g.path(), ": pre-tokenizer \"", pre,
                        "\" (tokenizer.ggml.pre) is not supported (qwen2, or GPT-2's default)"));
  }
  t.tokenizer = {{"version", "1.0"},
                 {"truncation", nullptr},
                 {"padding", nullptr},
                 {"added_tokens", added},
                 {"normalizer", normalizer},
                 {"pre_tokenizer", pre_tokenizer},
                 {"post_processor", byte_level},
                 {"decoder", byte_level},
                 {"model",
                  {{"type", "BPE"},
                   {"dropout", nullptr},
                   {"unk_token", nullptr},
                   {"continuing_subword_prefix", ""},
                   {"end_of_word_suffix", ""},
                   {"fuse_unk", false},
                   {"byte_fallback", false},
                   {"ignore_merges", false},
                   {"vocab", vocab},
                   {"merges", merge_pairs}}}};
  return t;
}

json tokenizer_config_json(const GgufFile& g, const Tokenizer& t, int64_t max_positions) {
  const json& tokens = g.get("tokenizer.ggml.tokens");
  auto token = [&](const char* key) -> json {
    const std::string k = std::string("tokenizer.ggml.") + key;
    if (!g.has(k)) return nullptr;
    const auto id = g.get(k).get<int64_t>();
    MC_CHECK(id >= 0 && id < static_cast<int64_t>(tokens.size()), g.path(), ": ", k, " = ", id, " is not a token");
    return tokens[id];
  };
  json c = {{"tokenizer_class", "Qwen2Tokenizer"},
            {"added_tokens_decoder", t.added_decoder},
            {"bos_token", token("bos_token_id")},
            {"eos_token", token("eos_token_id")},
            {"pad_token", token("padding_token_id")},
            {"unk_token", token("unknown_token_id")},
            {"add_bos_token", g.has("tokenizer.ggml.add_bos_token") && g.get("tokenizer.ggml.add_bos_token").get<bool>()},
            {"add_prefix_space", false},
            {"clean_up_tokenization_spaces", false},
            {"errors", "replace"},
            {"split_special_tokens", false},
            {"model_max_length", max_positions}};
  if (g.has("tokenizer.chat_template")) c["chat_template"] = g.get("tokenizer.chat_template");
  return c;
}

}  // namespace

GgufImport import_gguf(const std::string& gguf_path, const std::string& out_dir, DType dtype) {
  MC_CHECK(dtype == DType::kBF16 || dtype == DType::kF32, "a GGUF converts to bf16 or fp32 weights");
  GgufFile g(gguf_path);
  GgufImport r;
  const std::string arch = g.has("general.architecture") ? g.get("general.architecture").get<std::string>() : "";
  MC_CHECK(arch == "qwen2" || arch == "qwen3", gguf_path, ": architecture \"", arch,
           "\" (general.architecture) is not supported (qwen2 and qwen3: the model stack runs Qwen2/Qwen3 decoders)");
  if (g.has("general.name")) r.name = g.get("general.name").get<std::string>();

  // Every tensor must have a Hugging Face name and a type we can dequantize.
  const GgufTensor* embd = g.find("token_embd.weight");
  MC_CHECK(embd && embd->dims.size() == 2, gguf_path, ": no 2-D token_embd.weight tensor");
  for (const auto& t : g.tensors()) {
    MC_CHECK(!hf_name(t.name).empty(), gguf_path, ": tensor ", t.name, " has no counterpart in a ", arch,
             " model (a different architecture, or a multimodal file?)");
    r.types[ggml_type_name(t.type)] += 1;
    MC_CHECK(ggml_type_info(t.type), gguf_path, ": tensor ", t.name, " has type ", ggml_type_name(t.type),
             ", which the converter cannot dequantize (supported: ", supported_types(), ")");
  }
  const bool tied = !g.find("output.weight");
  const bool qkv_bias = g.find("blk.0.attn_q.bias") != nullptr;
  json config = config_json(g, arch, embd->dims[1], tied, qkv_bias, dtype);
  // The same checks the model loader makes, before any weights are written.
  QwenConfig qc = QwenConfig::from_json(config, gguf_path + " (as config.json)");
  r.architecture = qc.architecture;
  Tokenizer tok = tokenizer_json(g);

  // The tensors by Hugging Face name; each is dequantized into the output dtype only as the
  // writer reaches it, so memory holds one tensor at a time, not the model.
  std::vector<const GgufTensor*> source;
  for (const auto& t : g.tensors()) source.push_back(&t);
  std::sort(source.begin(), source.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return hf_name(a->name) < hf_name(b->name); });
  std::vector<TensorView> views;
  for (const GgufTensor* t : source) {
    TensorView v;
    v.name = hf_name(t->name);
    v.dtype = dtype;
    v.shape = t->torch_shape();
    v.nbytes = static_cast<size_t>(t->numel()) * dtype_size(dtype);
    views.push_back(v);
    r.parameters += t->numel();
  }
  std::vector<float> scratch;
  auto fill = [&](size_t k, uint8_t* dst) {
    const GgufTensor& t = *source[k];
    const int64_t n = t.numel();
    if (dtype == DType::kF32) {
      dequantize(static_cast<GgmlType>(t.type), t.data, n, reinterpret_cast<float*>(dst));
      return;
    }
    scratch.resize(static_cast<size_t>(n));
    dequantize(static_cast<GgmlType>(t.type), t.data, n, scratch.data());
    auto* o = reinterpret_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) o[i] = fp32_to_bf16(scratch[i]);
  };

  fs::create_directories(out_dir);
  const fs::path dir(out_dir);
  write_safetensors((dir / "model.safetensors").string(), views, fill, {{"format", "pt"}});
  write_file_atomic(dir / "config.json", config.dump(2) + "\n");
  json gen = {{"_from_model_config", true}};
  for (const char* k : {"bos_token_id", "eos_token_id", "pad_token_id"})
    if (config.contains(k)) gen[k] = config[k];
  write_file_atomic(dir / "generation_config.json", gen.dump(2) + "\n");
  write_file_atomic(dir / "tokenizer.json", tok.tokenizer.dump() + "\n");
  write_file_atomic(dir / "tokenizer_config.json",
                    tokenizer_config_json(g, tok, config["max_position_embeddings"].get<int64_t>()).dump(2) + "\n");

  r.sha256 = file_sha256_hex(gguf_path);
  json general = json::object();
  for (const auto& [k, v] : g.metadata())
    if (k.rfind("general.", 0) == 0) general[k] = v;
  json prov = {{"gguf", fs::path(gguf_path).filename().string()},
               {"bytes", fs::file_size(gguf_path)},
               {"sha256", r.sha256},
               {"gguf_version", g.version()},
               {"general", general},
               {"tensor_types", r.types},
               {"dtype", dtype_name(dtype)},
               {"parameters", r.parameters}};
  write_file_atomic(dir / "gguf.json", prov.dump(2) + "\n");
  return r;
}

}  // namespace mc::model
