// compile-check: module mk_tk_tests
// sync_tests.cu: warp reductions, global counters, mbarrier waits/timeouts, fp32 atomics,
// timers, warpgroup hand-off and programmatic dependent launch.
#include "common.cuh"

namespace mk::tk_tests {
namespace {
using namespace mk::tk;

__global__ void warp_reduce_kernel(const float* x, const int* idx, float* sums, float* maxes,
                                   float* arg_vals, int* arg_idx) {
  const int w = blockIdx.x, lane = lane_id();
  const float v = x[w * 32 + lane];
  const float s = warp_sum(v), mx = warp_max(v);
  const value_index am = warp_argmax({v, idx[w * 32 + lane]});
  if (lane == 0) {
    sums[w] = s;
    maxes[w] = mx;
    arg_vals[w] = am.value;
    arg_idx[w] = am.index;
  }
}

// Block b waits for counter >= b, derives data[b] from data[b-1] (written by another SM), then
// signals. Any visibility bug shows up as a wrong chain value.
__global__ void counter_chain_kernel(int* data, int* counter, uint64_t timeout_ns, int* status) {
  if (threadIdx.x != 0) return;
  const int b = blockIdx.x;
  if (!wait_counter_geq(counter, b, timeout_ns)) {
    atomicExch(status, 1);
    return;
  }
  data[b] = b == 0 ? 7 : (data[b - 1] * 31 + b) % 1000003;
  signal_add(counter, 1);
}

__global__ void counter_timeout_kernel(const int* counter, int target, uint64_t timeout_ns,
                                       long long* out) {
  const uint64_t t0 = globaltimer();
  const bool ok = wait_counter_geq(counter, target, timeout_ns);
  out[0] = ok;
  out[1] = static_cast<long long>(globaltimer() - t0);
  out[2] = load_acquire(counter);
}

// out[0]: wait after 1 of 2 arrivals (expect 0); out[1]: wait after 2 of 2 (expect 1);
// out[2]: wait on the next phase's parity (expect 0); out[3]: test_wait on completed phase (1);
// out[4]: expect_tx + arrive + plain arrivals complete phase 1 (expect 1).
__global__ void mbarrier_kernel(uint64_t timeout_ns, int* out) {
  __shared__ semaphore sem;
  if (threadIdx.x != 0) return;
  init_semaphore(sem, 2);
  fence_semaphore_init();
  arrive(sem);
  out[0] = wait(sem, 0, timeout_ns);
  arrive(sem);
  out[1] = wait(sem, 0, timeout_ns);
  out[2] = wait(sem, 1, timeout_ns);
  out[3] = test_wait(sem, 0);
  arrive(sem, 2);  // phase 1 completes with a counted arrive
  out[4] = wait(sem, 1, timeout_ns);
  invalidate_semaphore(sem);
}

__global__ void atomic_add_kernel(float* dst, const float* src, int n, int n_dst, int vec4) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (vec4) {
    if (4 * i >= n) return;
    const float4 v = *reinterpret_cast<const float4*>(src + 4 * i);
    atomic_add_f32x4(dst + (4 * i) % n_dst, v);
  } else if (i < n) {
    atomic_add_f32(dst + i % n_dst, src[i]);
  }
}

// Per block: start time, time after spinning >= spin_ns, SM id.
__global__ void timer_kernel(unsigned long long* out, uint64_t spin_ns) {
  if (threadIdx.x != 0) return;
  const uint64_t t0 = globaltimer();
  uint64_t t1 = t0;
  while (t1 - t0 < spin_ns) {
    __nanosleep(100);
    t1 = globaltimer();
  }
  out[3 * blockIdx.x + 0] = t0;
  out[3 * blockIdx.x + 1] = t1;
  out[3 * blockIdx.x + 2] = smid();
}

// Warpgroup 0 shrinks its registers and produces into smem, warpgroup 1 grows and consumes
// after a named barrier: out[i] = 2 * in[i] + 1 for 128 elements.
constexpr int HANDOFF_BARRIER = 5;
__global__ void __launch_bounds__(256, 1) handoff_kernel(const float* in, float* out) {
  __shared__ float buf[128];
  if (warpgroup_id() == 0) {
    decrease_registers<40>();
    buf[threadIdx.x] = 2.f * in[threadIdx.x];
    named_arrive<256>(HANDOFF_BARRIER);
  } else {
    increase_registers<240>();  // more than the launch allocation: uses what WG0 freed
    named_sync<256>(HANDOFF_BARRIER);
    const int i = threadIdx.x - 128;
    const float v = buf[i] + 1.f;
    warpgroup_sync();
    out[i] = v;
  }
}

// Programmatic dependent launch: the producer lets its dependent launch at once, then spins before writing;
// the consumer (launched with the PDL attribute) notes when it started, waits for the producer, then reads.
// times[b] = {producer's write time, consumer's start time}.
__global__ void pdl_producer_kernel(int* data, uint64_t spin_ns, long long* times) {
  allow_dependent_grids();
  if (threadIdx.x != 0) return;
  const uint64_t t0 = globaltimer();
  while (globaltimer() - t0 < spin_ns) __nanosleep(100);
  data[blockIdx.x] = 1000 + 7 * blockIdx.x;
  times[2 * blockIdx.x] = (long long)globaltimer();
}

__global__ void pdl_consumer_kernel(const int* data, int* out, long long* times) {
  const long long started = (long long)globaltimer();
  wait_prerequisite_grids();
  if (threadIdx.x != 0) return;
  times[2 * blockIdx.x + 1] = started;
  out[blockIdx.x] = data[blockIdx.x];
}

void warp_reduce(std::uintptr_t x, std::uintptr_t idx, int n_warps, std::uintptr_t sums,
                 std::uintptr_t maxes, std::uintptr_t arg_vals, std::uintptr_t arg_idx) {
  MK_REQUIRE(n_warps > 0, "n_warps must be positive");
  warp_reduce_kernel<<<n_warps, 32>>>(as_ptr<const float>(x), as_ptr<const int>(idx),
                                      as_ptr<float>(sums), as_ptr<float>(maxes),
                                      as_ptr<float>(arg_vals), as_ptr<int>(arg_idx));
  MK_CUDA_CHECK_LAUNCH_SYNC();
}

void counter_chain(std::uintptr_t data, std::uintptr_t counter, int n_blocks, uint64_t timeout_ns) {
  int sms = 0;
  MK_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  MK_REQUIRE(n_blocks > 0 && n_blocks <= sms, "all blocks must be co-resident (<= SM count)");
  device_status status;
  counter_chain_kernel<<<n_blocks, 32>>>(as_ptr<int>(data), as_ptr<int>(counter), timeout_ns,
                                         status.get());
  MK_CUDA_CHECK_LAUNCH_SYNC();
  status.check("counter_chain: a wait timed out");
}

void pdl_handoff(std::uintptr_t data, std::uintptr_t out, std::uintptr_t times, int n_blocks, uint64_t spin_ns) {
  MK_REQUIRE(n_blocks > 0, "n_blocks must be positive");
  pdl_producer_kernel<<<n_blocks, 32>>>(as_ptr<int>(data), spin_ns, as_ptr<long long>(times));
  MK_CUDA_CHECK(cudaGetLastError());
  launch_maybe_pdl(pdl_consumer_kernel, dim3(n_blocks), dim3(32), 0, nullptr, /*pdl=*/true, as_ptr<const int>(data),
                   as_ptr<int>(out), as_ptr<long long>(times));
  MK_CUDA_CHECK_LAUNCH_SYNC();
}

void counter_timeout(std::uintptr_t counter, int target, uint64_t timeout_ns, std::uintptr_t out) {
  counter_timeout_kernel<<<1, 1>>>(as_ptr<const int>(counter), target, timeout_ns,
                                   as_ptr<long long>(out));
  MK_CUDA_CHECK_LAUNCH_SYNC();
}

void mbarrier_waits(uint64_t timeout_ns, std::uintptr_t out) {
  mbarrier_kernel<<<1, 32>>>(timeout_ns, as_ptr<int>(out));
  MK_CUDA_CHECK_LAUNCH_SYNC();
}

void atomic_add(std::uintptr_t dst, std::uintptr_t src, int n, int n_dst, bool vec4) {
  MK_REQUIRE(n > 0 && n_dst > 0, "sizes must be positive");
  MK_REQUIRE(!vec4 || (n % 4 == 0 && n_dst % 4 == 0), "vec4 needs sizes divisible by 4");
  const int threads = vec4 ? n / 4 : n;
  atomic_add_kernel<<<(threads + 255) / 256, 256>>>(as_ptr<float>(dst), as_ptr<const float>(src),
                                                    n, n_dst, vec4 ? 1 : 0);
  MK_CUDA_CHECK_LAUNCH_SYNC();
}

void timers(std::uintptr_t out, int n_blocks, uint64_t spin_ns) {
  timer_kernel<<<n_blocks, 32>>>(as_ptr<unsigned long long>(out), spin_ns);
  MK_CUDA_CHECK_LAUNCH_SYNC();
}

void warpgroup_handoff(std::uintptr_t in, std::uintptr_t out) {
  handoff_kernel<<<1, 256>>>(as_ptr<const float>(in), as_ptr<float>(out));
  MK_CUDA_CHECK_LAUNCH_SYNC();
}
}  // namespace

void register_sync(pybind11::module_& m) {
  namespace py = pybind11;
  m.def("warp_reduce", &warp_reduce, py::arg("x"), py::arg("idx"), py::arg("n_warps"),
        py::arg("sums"), py::arg("maxes"), py::arg("arg_vals"), py::arg("arg_idx"));
  m.def("counter_chain", &counter_chain, py::arg("data"), py::arg("counter"), py::arg("n_blocks"),
        py::arg("timeout_ns"));
  m.def("pdl_handoff", &pdl_handoff, py::arg("data"), py::arg("out"), py::arg("times"), py::arg("n_blocks"),
        py::arg("spin_ns"));
  m.def("counter_timeout", &counter_timeout, py::arg("counter"), py::arg("target"),
        py::arg("timeout_ns"), py::arg("out"));
  m.def("mbarrier_waits", &mbarrier_waits, py::arg("timeout_ns"), py::arg("out"));
  m.def("atomic_add", &atomic_add, py::arg("dst"), py::arg("src"), py::arg("n"), py::arg("n_dst"),
        py::arg("vec4"));
  m.def("timers", &timers, py::arg("out"), py::arg("n_blocks"), py::arg("spin_ns"));
  m.def("warpgroup_handoff", &warpgroup_handoff, py::arg("inp"), py::arg("out"));
}

}  // namespace mk::tk_tests
