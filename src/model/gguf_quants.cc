#include "model/gguf_quants.h"

#include <cstring>

#include "common/check.h"

namespace mc::model {
namespace {

constexpr int64_t QK = 32;    // values per block of the legacy types (Q4_0 ... Q8_0)
constexpr int64_t QK_K = 256; // values per super-block of the K-quants

uint16_t u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
float half(const uint8_t* p) { return fp16_to_fp32(u16(p)); }

// Q4_0: d, then 16 bytes: value j < 16 is the low nibble of byte j, value 16 + j its high one.
void q4_0(const uint8_t* b, float* y) {
  const float d = half(b);
  for (int j = 0; j < QK / 2; ++j) {
    y[j] = d * static_cast<float>((b[2 + j] & 0x0F) - 8);
    y[j + QK / 2] = d * static_cast<float>((b[2 + j] >> 4) - 8);
  }
}

void q4_1(const uint8_t* b, float* y) {
  const float d = half(b), m = half(b + 2);
  for (int j = 0; j < QK / 2; ++j) {
    y[j] = d * static_cast<float>(b[4 + j] & 0x0F) + m;
    y[j + QK / 2] = d * static_cast<float>(b[4 + j] >> 4) + m;
  }
}

// Q5_0: d, 32 high bits (value j's is bit j), 16 bytes of low nibbles as in Q4_0.
void q5_0(const uint8_t* b, float* y) {
  const float d = half(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  for (int j = 0; j < QK / 2; ++j) {
    const int lo = (b[6 + j] & 0x0F) | (((qh >> j) & 1) << 4);
    const int hi = (b[6 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    y[j] = d * static_cast<float>(lo - 16);
    y[j + QK / 2] = d * static_cast<float>(hi - 16);
  }
}

void q5_1(const uint8_t* b, float* y) {
  const float d = half(b), m = half(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  for (int j = 0; j < QK / 2; ++j) {
    const int lo = (b[8 + j] & 0x0F) | (((qh >> j) & 1) << 4);
    const int hi = (b[8 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    y[j] = d * static_cast<float>(lo) + m;
    y[j + QK / 2] = d * static_cast<float>(hi) + m;
  }
}

void q8_0(const uint8_t* b, float* y) {
  const float d = half(b);
  for (int j = 0; j < QK; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// Q2_K: 16 bytes of (min << 4 | scale), 64 bytes of 2-bit values, d, dmin. Value e of the
// super-block: half h = e / 128, shift t = (e % 128) / 32, l = e % 32, in byte h * 32 + l.
void q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = half(b + 80), dmin = half(b + 82);
  for (int e = 0; e < QK_K; ++e) {
    const int h = e / 128, t = (e % 128) / 32, l = e % 32, g = e / 16;
    const float dl = d * static_cast<float>(scales[g] & 0x0F);
    const float ml = dmin * static_cast<float>(scales[g] >> 4);
    const int q = (qs[h * 32 + l] >> (2 * t)) & 3;
    y[e] = dl * static_cast<float>(q) - ml;
  }
}

// Q3_K: 32 bytes of high-bit masks, 64 bytes of 2-bit values, 12 bytes of 6-bit signed scales,
// d. A set mask bit means no offset; a clear one subtracts 4.
void q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  const float d = half(b + 108);
  float dl[16];
  for (int i = 0; i < 16; ++i) {
    const int lo = (sc[i % 8] >> (4 * (i / 8))) & 0x0F;
    const int hi = (sc[8 + i % 4] >> (2 * (i / 4))) & 0x03;
    dl[i] = d * static_cast<float>(static_cast<int8_t>(lo | (hi << 4)) - 32);
  }
  for (int e = 0; e < QK_K; ++e) {
    const int h = e / 128, t = (e % 128) / 32, l = e % 32;
    const int ql = (qs[h * 32 + l] >> (2 * t)) & 3;
    const int qh = ((hmask[l] >> (e / 32)) & 1) ^ 1;
    y[e] = dl[e / 16] * static_cast<float>(ql - (qh << 2));
  }
}

// The 8 six-bit scales and mins of Q4_K / Q5_K, packed into 12 bytes.
void scale_min_k4(const uint8_t* s, uint8_t* sc, uint8_t* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 0x3F;
    mn[j] = s[4 + j] & 0x3F;
    sc[4 + j] = (s[8 + j] & 0x0F) | ((s[j] >> 2) & 0x30);
    mn[4 + j] = (s[8 + j] >> 4) | ((s[4 + j] >> 2) & 0x30);
  }
}

// Q4_K: d, dmin, 12 bytes of scales and mins, 128 bytes: sub-block j (32 values) is byte
// range (j / 2) * 32, low nibbles for even j, high for odd.
void q4_k(const uint8_t* b, float* y) {
  const float d = half(b), dmin = half(b + 2);
  uint8_t sc[8], mn[8];
  scale_min_k4(b + 4, sc, mn);
  const uint8_t* qs = b + 16;
  for (int j = 0; j < 8; ++j) {
    const float d1 = d * static_cast<float>(sc[j]), m1 = dmin * static_cast<float>(mn[j]);
    for (int l = 0; l < 32; ++l) {
      const int q = (qs[(j / 2) * 32 + l] >> (4 * (j % 2))) & 0x0F;
      y[j * 32 + l] = d1 * static_cast<float>(q) - m1;
    }
  }
}

// Q5_K: as Q4_K with 32 bytes of fifth bits before the nibbles (sub-block j's is bit j).
void q5_k(const uint8_t* b, float* y) {
  const float d = half(b), dmin = half(b + 2);
  uint8_t sc[8], mn[8];
  scale_min_k4(b + 4, sc, mn);
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int j = 0; j < 8; ++j) {
    const float d1 = d * static_cast<float>(sc[j]), m1 = dmin * static_cast<float>(mn[j]);
    for (int l = 0; l < 32; ++l) {
      const int q = ((qs[(j / 2) * 32 + l] >> (4 * (j % 2))) & 0x0F) | (((qh[l] >> j) & 1) << 4);
      y[j * 32 + l] = d1 * static_cast<float>(q) - m1;
    }
  }
}

// Q6_K: 128 bytes of low nibbles, 64 of high bit pairs, 16 int8 scales (one per 16 values), d.
// Value e: half h = e / 128, r = e % 128; low nibble from byte h * 64 + r % 64 (high nibble when
// r >= 64); high pair from byte h * 32 + r % 32, shifted by 2 * (r / 32).
void q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half(b + 208);
  for (int e = 0; e < QK_K; ++e) {
    const int h = e / 128, r = e % 128;
    const int lo = (ql[h * 64 + r % 64] >> (4 * (r / 64))) & 0x0F;
    const int hi = (qh[h * 32 + r % 32] >> (2 * (r / 32))) & 0x03;
    const float ds = d * static_cast<float>(scales[e / 16]);
    y[e] = ds * static_cast<float>((lo | (hi << 4)) - 32);
  }
}

struct Entry {
  GgmlType type;
  GgmlTypeInfo info;
  void (*block)(const uint8_t*, float*);
};

const Entry kTypes[] = {
    {GgmlType::kF32, {"F32", 1, 4}, nullptr},
    {GgmlType::kF16, {"F16", 1, 2}, nullptr},
    {GgmlType::kBF16, {"BF16", 1, 2}, nullptr},
    {GgmlType::kQ4_0, {"Q4_0", QK, 18}, q4_0},
    {GgmlType::kQ4_1, {"Q4_1", QK, 20}, q4_1},
    {GgmlType::kQ5_0, {"Q5_0", QK, 22}, q5_0},
    {GgmlType::kQ5_1, {"Q5_1", QK, 24}, q5_1},
    {GgmlType::kQ8_0, {"Q8_0", QK, 34}, q8_0},
    {GgmlType::kQ2_K, {"Q2_K", QK_K, 84}, q2_k},
    {GgmlType::kQ3_K, {"Q3_K", QK_K, 110}, q3_k},
    {GgmlType::kQ4_K, {"Q4_K", QK_K, 144}, q4_k},
    {GgmlType::kQ5_K, {"Q5_K", QK_K, 176}, q5_k},
    {GgmlType::kQ6_K, {"Q6_K", QK_K, 210}, q6_k},
};

const Entry* find(uint32_t type) {
  for (const auto& e : kTypes)
    if (static_cast<uint32_t>(e.type) == type) return &e;
  return nullptr;
}

}  // namespace

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (man << 13);  // inf, NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;  // signed zero
  } else {        // subnormal: normalise
    int e = -1;
    do {
      man <<= 1;
      ++e;
    } while (!(man & 0x400));
    bits = sign | static_cast<uint32_t>(112 - e) << 23 | ((man & 0x3FF) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t fp32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;  // NaN, as c10::BFloat16 writes it
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1)) >> 16);
}

const GgmlTypeInfo* ggml_type_info(uint32_t type) {
  const Entry* e = find(type);
  return e ? &e->info : nullptr;
}

std::string ggml_type_name(uint32_t type) {
  static const char* const kNames[] = {
      "F32",     "F16",    "Q4_0",    "Q4_1",  "Q4_2",   "Q4_3",  "Q5_0",   "Q5_1",   "Q8_0", "Q8_1",
      "Q2_K",    "Q3_K",   "Q4_K",    "Q5_K",  "Q6_K",   "Q8_K",  "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
      "IQ4_NL",  "IQ3_S",  "IQ2_S",   "IQ4_XS", "I8",    "I16",   "I32",    "I64",    "F64",  "IQ1_M",
      "BF16",    "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8",
      "IQ4_NL_8_8", "MXFP4"};
  if (type < sizeof kNames / sizeof kNames[0]) return kNames[type];
  return "type " + std::to_string(type);
}

size_t ggml_nbytes(GgmlType type, int64_t n) {
  const Entry* e = find(static_cast<uint32_t>(type));
  MC_INTERNAL_ASSERT(e, "unknown type ", static_cast<uint32_t>(type));
  MC_CHECK(n >= 0 && n % e->info.block == 0, n, " values are not a whole number of ", e->info.name, " blocks (",
           e->info.block, " values each)");
  return static_cast<size_t>(n / e->info.block) * e->info.block_bytes;
}

void dequantize(GgmlType type, const uint8_t* src, int64_t n, float* dst) {
  const Entry* e = find(static_cast<uint32_t>(type));
  MC_INTERNAL_ASSERT(e, "unknown type ", static_cast<uint32_t>(type));
  (void)ggml_nbytes(type, n);
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(u16(src + 2 * i));
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t bits = static_cast<uint32_t>(u16(src + 2 * i)) << 16;
        std::memcpy(dst + i, &bits, 4);
      }
      return;
    default:
      for (int64_t i = 0; i < n / e->info.block; ++i)
        e->block(src + i * e->info.block_bytes, dst + i * e->info.block);
  }
}

}  // namespace mc::model
