// A GGUF model (llama.cpp's format) made into a Hugging Face model folder that transformers and
// our engine load: config.json and generation_config.json from the GGUF metadata, the weights
// dequantized into model.safetensors under their Hugging Face names, tokenizer.json rebuilt from
// the GGUF vocabulary, merges, token types and pre-tokenizer, tokenizer_config.json with the
// chat template and the special tokens, and gguf.json recording where it all came from.
//
// Supported: architectures qwen2 and qwen3 (the dense decoders our model stack runs) with a
// byte-level BPE ("gpt2") vocabulary; tensor types F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K. Anything else is refused by name.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "model/safetensors.h"

namespace mc::model {

struct GgufImport {
  std::string architecture;                 // "Qwen2ForCausalLM", ...
  std::string name;                         // general.name, "" if absent
  std::string sha256;                       // of the GGUF file
  int64_t parameters = 0;                   // values written (a tied head counted once)
  std::map<std::string, int64_t> types;     // ggml type name -> tensors of it in the file
};

// Writes the folder `out_dir` (created; existing files of the same names are replaced) with the
// weights in `dtype` (kBF16 or kF32). Throws mc::Error naming the file and what is wrong: not
// a GGUF file, truncated, an unsupported architecture, vocabulary or tensor type, a tensor that
// is missing or has the wrong shape.
GgufImport import_gguf(const std::string& gguf_path, const std::string& out_dir, DType dtype);

}  // namespace mc::model
