// What the generation engine's tests share: a tiny random Qwen3 (GQA, q/k norms), the devices
// they run on (the CPU, and CUDA where there is one), a greedy request, and two completions
// compared token for token.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <ATen/Context.h>

#include "generate/engine.h"
#include "model/qwen_model.h"

namespace mc::test {

// Larger weights than a fresh model's (init_std 0.25): peaked logits, so that greedy choices are
// not near-ties that two computations' last-bit differences (prefill paths, batch shapes) flip.
inline mc::model::QwenModel tiny_qwen3(c10::Device device, at::ScalarType dtype = at::kFloat) {
  mc::model::QwenConfig c;
  c.architecture = "Qwen3ForCausalLM";
  c.vocab_size = 97;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;  // GQA
  c.head_dim = 16;
  c.max_position_embeddings = 256;
  c.qk_norm = true;
  c.eos_token_ids = {96};
  return mc::model::QwenModel::random(c, device, dtype, 7, /*init_std=*/0.25);
}

inline std::vector<std::string> test_devices() {
  std::vector<std::string> d{"cpu"};
  if (at::hasCUDA()) d.push_back("cuda");
  return d;
}

// Greedy, EOS ignored (every answer runs to max_new unless a stop token says otherwise); with
// `keep` its cache is kept, and with `continues` it continues a kept entry.
inline mc::gen::GenerationRequest greedy(std::vector<int32_t> prompt, int max_new, bool keep = false,
                                         int64_t continues = -1) {
  mc::gen::GenerationRequest r;
  r.prompt = std::move(prompt);
  r.params.temperature = 0;
  r.params.max_new_tokens = max_new;
  r.params.ignore_eos = true;
  r.keep_kv = keep;
  r.continues = continues;
  return r;
}

// The same tokens, and log-probs within 2e-4.
inline void expect_same(const mc::gen::Completion& got, const mc::gen::Completion& want, const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << what;
  for (size_t i = 0; i < got.logprobs.size(); ++i) EXPECT_NEAR(got.logprobs[i], want.logprobs[i], 2e-4) << what << " token " << i;
}

}  // namespace mc::test
