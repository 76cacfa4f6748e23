// Counter-based random numbers for sampling: the noise for (seed, step, token) is a pure
// function of those three, on the CPU and in the CUDA kernel alike. A sequence's samples thus
// depend on its own seed only, never on which other sequences share its batch.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define MC_HD __host__ __device__ __forceinline__
#else
#define MC_HD inline
#endif

namespace mc::gen {

// SplitMix64's finalizer: a bijective 64-bit mix with full avalanche.
MC_HD uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

MC_HD uint64_t step_key(uint64_t seed, uint64_t step) { return mix64(seed ^ mix64(step ^ 0x632BE59BD9B4E019ull)); }

// Gumbel(0, 1) noise for token i: -log(-log(u)), u uniform in (0, 1) from 24 random bits.
MC_HD float gumbel(uint64_t key, uint64_t i) {
  uint64_t r = mix64(key + i * 0xD1B54A32D192ED03ull);
  float u = (static_cast<float>(r >> 40) + 0.5f) * (1.0f / 16777216.0f);
  return -logf(-logf(u));
}

}  // namespace mc::gen
