// compile-check: module mk_peer_memory
// peer_memory.cu: device memory that the other processes of a tensor-parallel group map into theirs (CUDA IPC), for
// the exchange buffers TP_ALLREDUCE reads and writes across GPUs (engine/cuda/tp_peers.py,
// engine/instructions/tp_exchange.py). Its own allocations (cudaMalloc), not the caching allocator's: an IPC handle
// maps a whole allocation, so a buffer must start one for the peer's pointer to be the buffer's.
#include <cuda_runtime.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "../tk/util.cuh"

namespace {

namespace py = pybind11;

// `bytes` of zeroed device memory on the current device; its address.
uintptr_t alloc_zeroed(size_t bytes) {
  if (bytes == 0) throw std::invalid_argument("peer memory: zero bytes");
  void* p = nullptr;
  MK_CUDA_CHECK(cudaMalloc(&p, bytes));
  MK_CUDA_CHECK(cudaMemset(p, 0, bytes));
  MK_CUDA_CHECK(cudaDeviceSynchronize());
  return reinterpret_cast<uintptr_t>(p);
}

void free_memory(uintptr_t p) { MK_CUDA_CHECK(cudaFree(reinterpret_cast<void*>(p))); }

// The IPC handle of an allocation made by alloc_zeroed, as bytes another process passes to open_handle.
py::bytes export_handle(uintptr_t p) {
  cudaIpcMemHandle_t h;
  MK_CUDA_CHECK(cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(p)));
  return py::bytes(reinterpret_cast<const char*>(&h), sizeof(h));
}

// Another process's allocation mapped into this one (peer access enabled as the kernels touch it); its address here.
uintptr_t open_handle(const py::bytes& handle) {
  const std::string s = handle;
  if (s.size() != sizeof(cudaIpcMemHandle_t)) throw std::invalid_argument("peer memory: not an IPC handle");
  cudaIpcMemHandle_t h;
  memcpy(&h, s.data(), sizeof(h));
  void* p = nullptr;
  MK_CUDA_CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
  return reinterpret_cast<uintptr_t>(p);
}

void close_handle(uintptr_t p) { MK_CUDA_CHECK(cudaIpcCloseMemHandle(reinterpret_cast<void*>(p))); }

}  // namespace

PYBIND11_MODULE(mk_peer_memory, m) {
  m.doc() = "Device memory shared with the other processes of a tensor-parallel group (CUDA IPC)";
  m.def("alloc_zeroed", &alloc_zeroed, py::arg("bytes"));
  m.def("free", &free_memory, py::arg("ptr"));
  m.def("export_handle", &export_handle, py::arg("ptr"));
  m.def("open_handle", &open_handle, py::arg("handle"));
  m.def("close_handle", &close_handle, py::arg("ptr"));
}
