// config.json parsing for Qwen2 / Qwen3 (torch-free): defaults, both RoPE spellings, and
// errors that name the field.
#include <gtest/gtest.h>

#include "common/check.h"
#include "model/qwen_config.h"

namespace {

using mc::model::QwenConfig;
using json = nlohmann::json;

json base() {
  return {{"architectures", {"Qwen2ForCausalLM"}}, {"vocab_size", 1000}, {"hidden_size", 64}, {"intermediate_size", 128},
          {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"rope_theta", 5000.0},
          {"eos_token_id", {7, 8}}, {"torch_dtype", "bfloat16"}};
}

std::string error_of(const json& j) {
  try {
    QwenConfig::from_json(j, "cfg.json");
  } catch (const mc::Error& e) {
    return e.what();
  }
  return "";
}

TEST(QwenConfig, Qwen2Defaults) {
  auto c = QwenConfig::from_json(base());
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_DOUBLE_EQ(c.rope_theta, 5000.0);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(c.dtype, "bfloat16");
}

TEST(QwenConfig, Qwen3WithRopeParameters) {
  auto j = base();
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["head_dim"] = 24;
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_theta", 1e6}, {"rope_type", "default"}};
  auto c = QwenConfig::from_json(j);
  EXPECT_EQ(c.head_dim, 24);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  j["attention_bias"] = true;
  EXPECT_TRUE(QwenConfig::from_json(j).o_bias);
}

TEST(QwenConfig, ErrorsNameTheField) {
  auto j = base();
  j["architectures"] = {"LlamaForCausalLM"};
  EXPECT_NE(error_of(j).find("unsupported architecture \"LlamaForCausalLM\""), std::string::npos);
  j = base();
  j.erase("hidden_size");
  EXPECT_NE(error_of(j).find("cfg.json: missing \"hidden_size\""), std::string::npos);
  j = base();
  j["num_key_value_heads"] = 3;
  EXPECT_NE(error_of(j).find("multiple of num_key_value_heads"), std::string::npos);
  j = base();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}};
  EXPECT_NE(error_of(j).find("unsupported RoPE scaling \"yarn\""), std::string::npos);
  j = base();
  j["use_sliding_window"] = true;
  EXPECT_NE(error_of(j).find("use_sliding_window"), std::string::npos);
  j = base();
  j["vocab_size"] = -5;
  EXPECT_NE(error_of(j).find("\"vocab_size\" must be a positive integer"), std::string::npos);
  EXPECT_THROW(QwenConfig::from_file("/nonexistent/config.json"), mc::Error);
}

}  // namespace
