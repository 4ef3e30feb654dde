// compile-check: module mk_tk_tests
// tma_tests.cu: 1-D bulk load/store/store-add with cache hints, and 2-D tensor-map tile
// load/store/store-add through the 128-byte swizzle.
#include "common.cuh"

namespace mk::tk_tests {
namespace {
using namespace mk::tk;

constexpr uint64_t TIMEOUT_NS = 1'000'000'000ull;
constexpr uint32_t CHUNK_BYTES = 4096;  // several copies complete one barrier phase

template <cache_hint H>
__device__ void load_chunks(void* dst, const void* src, uint32_t bytes, semaphore& sem) {
  arrive_expect_tx(sem, bytes);
  for (uint32_t off = 0; off < bytes; off += CHUNK_BYTES) {
    const uint32_t n = bytes - off < CHUNK_BYTES ? bytes - off : CHUNK_BYTES;
    bulk_load<H>(static_cast<char*>(dst) + off, static_cast<const char*>(src) + off, n, sem);
  }
}

// dst <- src through shared memory: bulk loads (hint H) then one bulk store (hint H).
template <cache_hint H>
__global__ void bulk_copy_kernel(char* dst, const char* src, uint32_t bytes, int* status) {
  extern __shared__ char smem[];
  smem_allocator alloc(smem, bytes + 2 * TILE_ALIGN);
  semaphore& sem = alloc.allocate<semaphore>();
  char* buf = &alloc.allocate<char, 128>();  // bytes follow it in the dynamic allocation
  if (threadIdx.x != 0) return;
  init_semaphore(sem, 1);
  fence_semaphore_init();
  bulk_prefetch_l2(src, bytes);
  load_chunks<H>(buf, src, bytes, sem);
  if (!wait(sem, 0, TIMEOUT_NS)) {
    atomicExch(status, 1);
    return;
  }
  bulk_store<H>(dst, buf, bytes);
  bulk_commit();
  bulk_wait<0>();
}

// dst += src (element-wise) with the bulk reduce.
template <typename T>
__global__ void bulk_store_add_kernel(T* dst, const T* src, uint32_t bytes, int* status) {
  extern __shared__ char smem[];
  smem_allocator alloc(smem, bytes + 2 * TILE_ALIGN);
  semaphore& sem = alloc.allocate<semaphore>();
  T* buf = &alloc.allocate<T, 128>();
  if (threadIdx.x != 0) return;
  init_semaphore(sem, 1);
  fence_semaphore_init();
  load_chunks<cache_hint::evict_last>(buf, src, bytes, sem);
  if (!wait(sem, 0, TIMEOUT_NS)) {
    atomicExch(status, 1);
    return;
  }
  bulk_store_add(dst, buf, bytes);
  bulk_commit();
  bulk_wait_read<0>();  // smem reusable ...
  bulk_wait<0>();       // ... and the writes done
}

using tile_bf = st_bf<64, 128>;  // two 128-byte panels
using tile_fl = st_fl<32, 64>;   // two 128-byte panels

// Tile at (row, col) of a global matrix -> smem via TMA -> out (row-major, logical order via idx).
template <typename ST>
__global__ void tile_load_kernel(const __grid_constant__ CUtensorMap map, int row, int col,
                                 typename ST::dtype* out, int* status) {
  extern __shared__ char smem[];
  smem_allocator alloc(smem, sizeof(ST) + 2 * TILE_ALIGN);
  semaphore& sem = alloc.allocate<semaphore>();
  ST& tile = alloc.allocate<ST, TILE_ALIGN>();
  if (threadIdx.x == 0) {
    prefetch_tensor_map(&map);
    init_semaphore(sem, 1);
    fence_semaphore_init();
    arrive_expect_tx(sem, ST::BYTES);
    load_tile<cache_hint::evict_first>(tile, &map, row, col, sem);
  }
  __syncthreads();
  if (!wait(sem, 0, TIMEOUT_NS)) {
    atomicExch(status, 1);
    return;
  }
  for (int i = threadIdx.x; i < ST::ROWS * ST::COLS; i += blockDim.x)
    out[i] = tile(i / ST::COLS, i % ST::COLS);
}

// in (row-major, logical) -> smem tile via idx -> TMA store (or store-add) at (row, col).
template <typename ST>
__global__ void tile_store_kernel(const __grid_constant__ CUtensorMap map, int row, int col,
                                  const typename ST::dtype* in, int add) {
  extern __shared__ char smem[];
  smem_allocator alloc(smem, sizeof(ST) + 2 * TILE_ALIGN);
  ST& tile = alloc.allocate<ST, TILE_ALIGN>();
  for (int i = threadIdx.x; i < ST::ROWS * ST::COLS; i += blockDim.x)
    tile(i / ST::COLS, i % ST::COLS) = in[i];
  fence_proxy_async_shared();  // every writer, before the barrier
  __syncthreads();
  if (threadIdx.x == 0) {
    if (add) {
      store_add_tile(&map, row, col, tile);
    } else {
      store_tile(&map, row, col, tile);
    }
    bulk_commit();
    bulk_wait<0>();
  }
}

void bulk_copy(std::uintptr_t dst, std::uintptr_t src, uint32_t bytes, int hint) {
  MK_REQUIRE(bytes > 0 && bytes % 16 == 0 && bytes <= 160 * 1024, "bytes: 16..160Ki, % 16");
  MK_REQUIRE(dst % 16 == 0 && src % 16 == 0, "pointers must be 16-byte aligned");
  device_status status;
  const int smem_bytes = int(bytes) + 2 * TILE_ALIGN;
  auto launch = [&](auto kernel) {
    allow_dynamic_smem(kernel, smem_bytes);
    kernel<<<1, 32, smem_bytes>>>(as_ptr<char>(dst), as_ptr<const char>(src), bytes, status.get());
  };
  if (hint == 0) {
    launch(bulk_copy_kernel<cache_hint::normal>);
  } else if (hint == 1) {
    launch(bulk_copy_kernel<cache_hint::evict_first>);
  } else if (hint == 2) {
    launch(bulk_copy_kernel<cache_hint::evict_last>);
  } else {
    MK_REQUIRE(false, "hint must be 0 (normal), 1 (evict_first) or 2 (evict_last)");
  }
  MK_CUDA_CHECK_LAUNCH_SYNC();
  status.check("bulk_copy: barrier wait timed out");
}

void bulk_store_add(std::uintptr_t dst, std::uintptr_t src, uint32_t n, bool bf16_elems) {
  const uint32_t bytes = n * (bf16_elems ? 2 : 4);
  MK_REQUIRE(bytes > 0 && bytes % 16 == 0 && bytes <= 160 * 1024, "bytes: 16..160Ki, % 16");
  device_status status;
  const int smem_bytes = int(bytes) + 2 * TILE_ALIGN;
  if (bf16_elems) {
    allow_dynamic_smem(bulk_store_add_kernel<bf16>, smem_bytes);
    bulk_store_add_kernel<bf16><<<1, 32, smem_bytes>>>(as_ptr<bf16>(dst), as_ptr<const bf16>(src),
                                                      bytes, status.get());
  } else {
    allow_dynamic_smem(bulk_store_add_kernel<float>, smem_bytes);
    bulk_store_add_kernel<float><<<1, 32, smem_bytes>>>(as_ptr<float>(dst),
                                                        as_ptr<const float>(src), bytes,
                                                        status.get());
  }
  MK_CUDA_CHECK_LAUNCH_SYNC();
  status.check("bulk_store_add: barrier wait timed out");
}

template <typename ST>
void tile_load_impl(std::uintptr_t src, int rows, int cols, int ld, int row, int col,
                    std::uintptr_t out) {
  using T = typename ST::dtype;
  const CUtensorMap map = make_tile_map<ST>(as_ptr<const T>(src), rows, cols, ld);
  device_status status;
  const int smem_bytes = int(sizeof(ST)) + 2 * TILE_ALIGN;
  allow_dynamic_smem(tile_load_kernel<ST>, smem_bytes);
  tile_load_kernel<ST><<<1, 128, smem_bytes>>>(map, row, col, as_ptr<T>(out), status.get());
  MK_CUDA_CHECK_LAUNCH_SYNC();
  status.check("tile_load: barrier wait timed out");
}

template <typename ST>
void tile_store_impl(std::uintptr_t dst, int rows, int cols, int ld, int row, int col,
                     std::uintptr_t in, bool add) {
  using T = typename ST::dtype;
  const CUtensorMap map = make_tile_map<ST>(as_ptr<const T>(dst), rows, cols, ld);
  const int smem_bytes = int(sizeof(ST)) + 2 * TILE_ALIGN;
  allow_dynamic_smem(tile_store_kernel<ST>, smem_bytes);
  tile_store_kernel<ST><<<1, 128, smem_bytes>>>(map, row, col, as_ptr<const T>(in), add ? 1 : 0);
  MK_CUDA_CHECK_LAUNCH_SYNC();
}

// Tile shapes exposed to Python: bf16 64x128 or fp32 32x64.
void tile_load(std::uintptr_t src, int rows, int cols, int ld, int row, int col, std::uintptr_t out,
               bool bf16_elems) {
  if (bf16_elems) {
    tile_load_impl<tile_bf>(src, rows, cols, ld, row, col, out);
  } else {
    tile_load_impl<tile_fl>(src, rows, cols, ld, row, col, out);
  }
}

void tile_store(std::uintptr_t dst, int rows, int cols, int ld, int row, int col,
                std::uintptr_t in, bool bf16_elems, bool add) {
  if (bf16_elems) {
    tile_store_impl<tile_bf>(dst, rows, cols, ld, row, col, in, add);
  } else {
    tile_store_impl<tile_fl>(dst, rows, cols, ld, row, col, in, add);
  }
}
}  // namespace

void register_tma(pybind11::module_& m) {
  namespace py = pybind11;
  m.def("bulk_copy", &bulk_copy, py::arg("dst"), py::arg("src"), py::arg("nbytes"),
        py::arg("hint"));
  m.def("bulk_store_add", &bulk_store_add, py::arg("dst"), py::arg("src"), py::arg("n"),
        py::arg("bf16"));
  m.def("tile_load", &tile_load, py::arg("src"), py::arg("rows"), py::arg("cols"), py::arg("ld"),
        py::arg("row"), py::arg("col"), py::arg("out"), py::arg("bf16"));
  m.def("tile_store", &tile_store, py::arg("dst"), py::arg("rows"), py::arg("cols"),
        py::arg("ld"), py::arg("row"), py::arg("col"), py::arg("inp"), py::arg("bf16"),
        py::arg("add"));
  m.attr("TILE_BF16_SHAPE") = py::make_tuple(tile_bf::ROWS, tile_bf::COLS);
  m.attr("TILE_FP32_SHAPE") = py::make_tuple(tile_fl::ROWS, tile_fl::COLS);
}

}  // namespace mk::tk_tests
