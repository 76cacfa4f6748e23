// ggml's tensor types as GGUF files store them, and their dequantization to float32.
//
// Each quantized type packs a fixed number of values (a block: 32, or 256 for the K-quants)
// into a fixed number of bytes: fp16 scales and packed small integers. The layouts and the
// arithmetic follow ggml-quants.c's dequantize_row_* (and gguf-py's quants.py, which the tests
// compare against bit for bit): every product and difference in float32, in that order, with
// no fused multiply-add (this file is compiled with -ffp-contract=off).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mc::model {

// The numbering is ggml's (enum ggml_type); only the types below are dequantized.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

struct GgmlTypeInfo {
  const char* name;   // ggml's spelling: "Q4_K", "F32", ...
  int64_t block;      // values per block
  size_t block_bytes; // bytes per block
};

// nullptr for a type this project cannot dequantize (an i-quant, Q8_1, an integer type, ...).
const GgmlTypeInfo* ggml_type_info(uint32_t type);
// ggml's name for any type number it defines ("IQ2_XXS", "Q8_K", ...), or "type N".
std::string ggml_type_name(uint32_t type);

// Bytes that `n` values of `type` take; throws mc::Error if n is not a whole number of blocks.
size_t ggml_nbytes(GgmlType type, int64_t n);

// Dequantizes `n` values (a whole number of blocks) starting at `src` into `dst`.
void dequantize(GgmlType type, const uint8_t* src, int64_t n, float* dst);

float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);  // round to nearest even, as c10::BFloat16 rounds

}  // namespace mc::model
