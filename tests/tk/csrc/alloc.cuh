// alloc.cuh: bump allocator over dynamic shared memory. Swizzled tiles need 1024-byte alignment
// (the 128-byte swizzle pattern repeats every 8 rows of 128 bytes), which `extern __shared__`
// alone does not guarantee, so the allocator aligns each request itself.
#pragma once

#include "tk/util.cuh"

namespace mk::tk {

inline constexpr int TILE_ALIGN = 1024;

struct smem_allocator {
  char* base;
  uint32_t used = 0;
  uint32_t capacity;

  __device__ smem_allocator(void* dynamic_smem, uint32_t capacity_bytes)
      : base(static_cast<char*>(dynamic_smem)), capacity(capacity_bytes) {}

  // Returns a T placed at the next ALIGN boundary (of the shared address, not the offset).
  // Traps when the request exceeds capacity: a layout bug, not a runtime condition.
  template <typename T, int ALIGN = (alignof(T) > 16 ? alignof(T) : 16)>
  __device__ T& allocate() {
    static_assert((ALIGN & (ALIGN - 1)) == 0, "allocate: ALIGN must be a power of two");
    const uint32_t addr = smem_addr(base + used);
    const uint32_t pad = (ALIGN - (addr % ALIGN)) % ALIGN;
    used += pad;
    T* p = reinterpret_cast<T*>(base + used);
    used += sizeof(T);
    if (used > capacity) __trap();
    return *p;
  }
};

}  // namespace mk::tk
