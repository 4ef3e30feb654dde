// shared_vec.cuh: loads from shared memory by shared-window address (ld.shared, 2 to 16 bytes; ldmatrix).
//
// A plain C++ load through a pointer into dynamic shared memory compiles to ld.shared only while the
// compiler can trace the pointer back to the `extern __shared__` array; once the pointer crosses a
// non-inlined call it becomes a generic load (slower: generic-to-shared resolution on every access).
// These take the address in the shared window (tk::smem_addr) so the state space is never lost.
#pragma once

#include "util.cuh"

namespace mk::tk {

__device__ __forceinline__ uint4 load_shared_u4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}

__device__ __forceinline__ float4 load_shared_f4(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr));
  return v;
}

// Narrower loads (a lane's 1, 2 or 4 bf16 of one cached key/value row: csrc/interpreter/attention_ring.cuh).
__device__ __forceinline__ uint32_t load_shared_u16(uint32_t addr) {
  unsigned short v;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(addr));
  return v;
}

__device__ __forceinline__ uint32_t load_shared_u32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr));
  return v;
}

__device__ __forceinline__ uint2 load_shared_u2(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(addr));
  return v;
}

// Four 8x8 b16 matrices by shared-window address: lane l gives the address of row l % 8 of matrix l / 8;
// lane l receives, of each matrix, row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 (packed).
__device__ __forceinline__ void ldmatrix_x4_shared(uint32_t (&d)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(addr));
}

// ... each 8x8 matrix transposed: lane l receives elements (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4) of the matrix
// whose row r starts at the address lane 8 m + r of matrix m gave (a k-major B fragment from rows that run along n).
__device__ __forceinline__ void ldmatrix_x4_trans_shared(uint32_t (&d)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(addr));
}

// Predicated forms: zeros when `pred` is false, and no branch either way (a guarded load that the
// compiler turns into a branch serialises the loads around it).
__device__ __forceinline__ uint4 load_shared_u4_if(uint32_t addr, bool pred) {
  uint4 v = make_uint4(0, 0, 0, 0);
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n @p ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n}"
               : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w) : "r"(addr), "r"((int)pred));
  return v;
}

__device__ __forceinline__ float4 load_shared_f4_if(uint32_t addr, bool pred) {
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n @p ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n}"
               : "+f"(v.x), "+f"(v.y), "+f"(v.z), "+f"(v.w) : "r"(addr), "r"((int)pred));
  return v;
}

}  // namespace mk::tk
