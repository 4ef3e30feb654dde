// sampling/sampling_noise.cuh: counter-based noise as engine/sampling/noise.py computes it, and the
// order-preserving keys of floats.
#pragma once

#include "sampling_config.cuh"

namespace mk::sampling {

__device__ __forceinline__ uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  return x ^ (x >> 16);
}

// noise.row_hashes: the key's words and the counter hashed into one word per row and step.
__device__ __forceinline__ uint32_t row_hash(const SampleArgs& a, int s) {
  uint32_t h = mix32(static_cast<uint32_t>(a.counters[s] & 0xFFFFFFFFll));
  h = mix32(static_cast<uint32_t>(a.keys[2 * s + 1]) ^ h);
  return mix32(static_cast<uint32_t>(a.keys[2 * s]) ^ h);
}

// noise.gumbel: 23 bits of the token's hash as a uniform in (0, 1), exactly representable.
__device__ __forceinline__ float gumbel(uint32_t row, int v) {
  const uint32_t h = mix32(row ^ mix32(static_cast<uint32_t>(v)));
  const float u = (static_cast<float>(h >> 9) + 0.5f) * (1.0f / 8388608.0f);
  // The inner logarithm exact (u near 1 decides the likeliest draws); the outer one's argument is far from 1, where
  // the fast hardware logarithm is accurate to a few ulps.
  return -__logf(-logf(u));
}

// The noise lies in [-2.82, 16.64] (u is at least 2^-24 from 0 and 1), and the row's top token (scaled value 0) is
// always kept: a token whose scaled value is below -(16.64 + 2.82) can never win the draw, so it is not drawn.
inline constexpr float NEVER_WINS = -19.5f;

// Float order as unsigned order (-inf lowest).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// order_key's inverse: the float whose key is k.
__device__ __forceinline__ float key_float(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

}  // namespace mk::sampling
