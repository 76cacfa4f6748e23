// A tiny random Qwen3 (GQA, q/k norms) for the generation engine's tests, and the devices they
// run on: the CPU, and CUDA where there is one.
#pragma once

#include <string>
#include <vector>

#include <ATen/Context.h>

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

}  // namespace mc::test
