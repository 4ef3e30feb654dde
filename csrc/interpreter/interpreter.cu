// compile-check: module mk_interpreter
// interpreter.cu: the persistent megakernel. One block per SM; warps 0..7 consume (math), warp 8 is
// the controller (instruction fetch-ahead), warp 9 the loader (TMA weight streaming). The host
// binding fills Globals by field name from a Python dict and launches on the caller's stream.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "advance.cuh"
#include "sampling/sample_rows.cuh"
#include "consumer.cuh"
#include "roles.cuh"
#include "../tk/registers.cuh"

namespace mk::vm {

// What a launch does, decided by thread 0 once the launches before it finished (block-uniform through shared memory).
inline constexpr int GATE_RUN = 0;
inline constexpr int GATE_ABORTED = 1;  // an earlier step failed
inline constexpr int GATE_SKIP = 2;     // its run of decode steps stopped at an earlier step (run_stop.cuh)

// A skipped launch does no work but leaves what a step leaves, so the stream's next launch (epoch + 1, in a run or
// not) finds what it waits for: every counter one period further (they are monotonic, epoch * period + target:
// state.cuh wait_dependency) and the dynamic queue's head one round of claims further (queue_len claims and one
// failing claim per block: roles.cuh next_instruction). Nothing else changes: no KV, activation, step-args or
// status word is written. Only this launch's blocks touch the counters now (the next launch reads them after
// waiting for this one), so plain read-modify-writes suffice.
__device__ __forceinline__ void skip_step(const Globals& g) {
  const int stride = (int)(gridDim.x * blockDim.x);
  for (int c = (int)(blockIdx.x * blockDim.x + threadIdx.x); c < g.num_counters; c += stride)
    g.counters[c] += g.counter_period[c];
  if (g.dynamic_queue && blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(g.queue_head, g.queue_len + (int)gridDim.x);
}

// TIMING: per-instruction timing records (Globals::timing). V: the variant (config.cuh); the batch-1 ones are
// compiled with only the paths of one sequence's one new token (the one-row matvec on the tensor cores, the ring
// attention, one attention path; each opcode's Op<OP>::in_variant, ops/): 239 / 237 KB of code against 759 KB,
// and batch-1 decode faster, most likely through the instruction caches (1B, H200: 0.794 -> 0.782 ms/token, H100
// 0.976 -> 0.952; without the CUDA-core page paths 0.780 -> 0.772; code_size.cuh). The host picks the variant
// per stream (engine/cuda/variant.py); an instruction a variant cannot run is a recorded error.
template <bool TIMING, int V>
__global__ void __launch_bounds__(BLOCK_THREADS, 1) megakernel(const __grid_constant__ Globals g) {
  extern __shared__ __align__(1024) uint8_t smem[];
  // Launched with PDL (KernelOptions.pdl), the next step's blocks take this grid's SMs as its blocks exit and
  // set up their shared memory, instead of the launch starting after the whole grid ended.
  tk::allow_dependent_grids();
  const Shared sm = Shared::carve(smem, g.ring_pages);
  if (threadIdx.x == 0) {
    for (int i = 0; i < sm.ring_pages; ++i) {
      tk::init_semaphore(sm.page_full[i], 1);   // the loader's arrive.expect_tx (+ TMA bytes)
      tk::init_semaphore(sm.page_empty[i], 1);  // the consumer warp that read the page
    }
    for (int i = 0; i < NUM_SLOTS; ++i) {
      tk::init_semaphore(sm.slot_full[i], 1);  // the controller
      tk::init_semaphore(sm.slot_free[i], 2);  // the loader and the consumers
    }
    *sm.ring_issued = 0;
    sm.ring_cursor[0] = sm.ring_cursor[1] = sm.ring_cursor[2] = 0;
    sm.ring_cursor[3] = NO_LOW_CAP;
    tk::fence_semaphore_init();
    // Everything after this reads what earlier steps wrote (error word, step args, counters, activations).
    tk::wait_prerequisite_grids();
    // An earlier queued step failed (its error word is still set): run nothing and issue no copy, so
    // the first failure's record survives and no block works on inconsistent counters. A step of a run that
    // stopped at an earlier step: run nothing either, with the bookkeeping of a step (skip_step). Both words were
    // written by earlier launches, so every block decides the same (run_stopped_before).
    reinterpret_cast<int*>(sm.scratch)[SCRATCH_FLOATS - 2] =
        aborted(g) ? GATE_ABORTED : run_stopped_before(g.run_stop, g.run_step) ? GATE_SKIP : GATE_RUN;
  }
  __syncthreads();
  const int gate = reinterpret_cast<const int*>(sm.scratch)[SCRATCH_FLOATS - 2];  // block-uniform
  if (gate != GATE_RUN) {
    if (gate == GATE_SKIP) skip_step(g);
    return;
  }
  const int warp = tk::warp_id();
  if (warp < NUM_CONSUMER_WARPS) {
    tk::warpgroup_take_registers<CONSUMER_REGISTERS>();
    run_consumers<TIMING, V>(g, sm);
  } else {
    tk::warpgroup_give_registers<PRODUCER_REGISTERS>();
    if (warp == CONTROLLER_WARP) {
      run_controller(g, sm);
    } else if (warp == LOADER_WARP) {
      run_loader(g, sm);
    }  // the producer warpgroup's two other warps have no role
  }
}

}  // namespace mk::vm

namespace {

namespace py = pybind11;
using mk::vm::Globals;

template <typename T>
T* ptr_field(const py::dict& d, const char* name, bool optional = false) {
  if (!d.contains(name)) {
    if (optional) return nullptr;
    throw std::invalid_argument(std::string("megakernel launch: missing field '") + name + "'");
  }
  return reinterpret_cast<T*>(d[name].cast<uintptr_t>());
}

template <typename T>
T scalar_field(const py::dict& d, const char* name) {
  if (!d.contains(name)) throw std::invalid_argument(std::string("megakernel launch: missing field '") + name + "'");
  return d[name].cast<T>();
}

// A field only some callers pass (tensor parallelism): absent, its value without the feature.
template <typename T>
T scalar_field_or(const py::dict& d, const char* name, T absent) {
  return d.contains(name) ? d[name].cast<T>() : absent;
}

std::invalid_argument bad_field(const char* name, const char* rule) {
  return std::invalid_argument(std::string("megakernel launch: '") + name + "' " + rule);
}

Globals globals_from_dict(const py::dict& d) {
  Globals g{};
#define MK_PTR(field, type) g.field = ptr_field<type>(d, #field)
  MK_PTR(embed, const mk::vm::bf16); MK_PTR(attn_norm, const mk::vm::bf16); MK_PTR(w_qkv, const mk::vm::bf16);
  MK_PTR(w_o, const mk::vm::bf16); MK_PTR(mlp_norm, const mk::vm::bf16); MK_PTR(w_gate_up, const mk::vm::bf16);
  MK_PTR(w_down, const mk::vm::bf16); MK_PTR(final_norm, const mk::vm::bf16); MK_PTR(lm_head, const mk::vm::bf16);
  MK_PTR(rope_inv_freq, const float); MK_PTR(k_cache, mk::vm::bf16); MK_PTR(v_cache, mk::vm::bf16);
  MK_PTR(hidden, float); MK_PTR(mid, float); MK_PTR(q, float); MK_PTR(attn_out, float); MK_PTR(o_part, float);
  MK_PTR(lse_part, float); MK_PTR(act, float); MK_PTR(x_bf16, mk::vm::bf16);
  MK_PTR(attn_bf16, mk::vm::bf16); MK_PTR(act_bf16, mk::vm::bf16);
  MK_PTR(logits, float); MK_PTR(lm_max, float);
  MK_PTR(lm_arg, int); MK_PTR(out_tokens, int); MK_PTR(counters, int); MK_PTR(counter_period, const int);
  MK_PTR(queue_head, int); MK_PTR(step_args, const int); MK_PTR(instructions, const int); MK_PTR(error, int);
  MK_PTR(progress, int);
#undef MK_PTR
  g.timing = ptr_field<long long>(d, "timing", /*optional=*/true);
  g.w_o_map = ptr_field<const CUtensorMap>(d, "w_o_map", /*optional=*/true);
  g.tile_maps = ptr_field<const CUtensorMap>(d, "tile_maps", /*optional=*/true);
  // fp8 matrices' scales (absent: bf16 matrices; weight_stream.cuh)
  g.w_qkv_scale = ptr_field<const float>(d, "w_qkv_scale", /*optional=*/true);
  g.w_o_scale = ptr_field<const float>(d, "w_o_scale", /*optional=*/true);
  g.w_gate_up_scale = ptr_field<const float>(d, "w_gate_up_scale", /*optional=*/true);
  g.w_down_scale = ptr_field<const float>(d, "w_down_scale", /*optional=*/true);
  g.lm_head_scale = ptr_field<const float>(d, "lm_head_scale", /*optional=*/true);
  g.advance_history = ptr_field<int>(d, "advance_history", /*optional=*/true);
  g.run_stop = ptr_field<int>(d, "run_stop", /*optional=*/true);
  g.run_step = g.run_stop ? scalar_field<int>(d, "run_step") : 0;
  // tensor parallelism (absent: one rank)
  g.tp_send = ptr_field<float* const>(d, "tp_send", /*optional=*/true);
  g.tp_flags = ptr_field<int* const>(d, "tp_flags", /*optional=*/true);
  g.tp_rank = scalar_field_or<int>(d, "tp_rank", 0);
  g.tp_world = scalar_field_or<int>(d, "tp_world", 1);
  g.tp_slot_tokens = scalar_field_or<int>(d, "tp_slot_tokens", 0);
  g.tp_flag_chunks = scalar_field_or<int>(d, "tp_flag_chunks", 0);
  g.tp_recv = ptr_field<unsigned long long* const>(d, "tp_recv", /*optional=*/true);
  g.tp_ll_tokens = g.tp_recv ? scalar_field_or<int>(d, "tp_ll_tokens", 0) : 0;
  g.tp_best = ptr_field<unsigned long long* const>(d, "tp_best", /*optional=*/true);
#define MK_INT(field) g.field = scalar_field<int>(d, #field)
  MK_INT(queue_len); MK_INT(dynamic_queue); MK_INT(epoch); MK_INT(hidden_size); MK_INT(intermediate);
  MK_INT(layers); MK_INT(n_heads); MK_INT(n_kv); MK_INT(head_dim); MK_INT(model_head_dim); MK_INT(vocab); MK_INT(kv_num_pages);
  MK_INT(gu_tile); MK_INT(lm_blocks); MK_INT(l2_prefetch_bytes);
  MK_INT(l2_beyond_ring_bytes); MK_INT(l2_beyond_ring_ops); MK_INT(max_inflight_pages); MK_INT(ring_pages);
  MK_INT(attn_kv_ring); MK_INT(defer_free_pages); MK_INT(chain_inflight_pages); MK_INT(chain_cap_ahead);
  MK_INT(low_cap_inputs); MK_INT(mma_matvec); MK_INT(mma_x_rows); MK_INT(token_group); MK_INT(lm_head_direct); MK_INT(attn_tiles); MK_INT(tile_page_pairs); MK_INT(embed_next); MK_INT(num_counters);
  MK_INT(tile_small_x); MK_INT(tile_pack_k); MK_INT(attn_kv_buffers); MK_INT(attn_head_units);
#undef MK_INT
  const auto header = scalar_field<std::vector<int>>(d, "sa_header");
  if (header.size() != static_cast<size_t>(mk::vm::SA_HEADER_WORDS))
    throw std::invalid_argument("megakernel launch: 'sa_header' must hold SA_HEADER_WORDS ints");
  for (int i = 0; i < mk::vm::SA_HEADER_WORDS; ++i) g.sa_header[i] = header[i];
  g.timeout_ns = scalar_field<long long>(d, "timeout_ns");
  g.eps = scalar_field<float>(d, "eps");
  return g;
}

void launch(const py::dict& fields, int grid, uintptr_t stream) {
  const Globals g = globals_from_dict(fields);
  if (g.ring_pages < mk::vm::MIN_RING_PAGES || g.ring_pages > mk::vm::MAX_RING_PAGES)
    throw std::invalid_argument("megakernel launch: 'ring_pages' must be in [MIN_RING_PAGES, MAX_RING_PAGES]");
  if (g.num_counters < 0) throw std::invalid_argument("megakernel launch: 'num_counters' must be >= 0");
  if (g.run_stop && g.run_step < 0) throw std::invalid_argument("megakernel launch: 'run_step' must be >= 0");
  if (g.tp_world < 1 || g.tp_world > mk::vm::MAX_TP_RANKS) throw bad_field("tp_world", "must be in [1, MAX_TP_RANKS]");
  if (g.tp_world > 1) {  // TP_ALLREDUCE's and TP_ARGMAX's exchange (ops/tp_allreduce.cuh, ops/tp_argmax.cuh)
    if (!g.tp_send) throw bad_field("tp_send", "must be set when tp_world > 1");
    if (!g.tp_flags) throw bad_field("tp_flags", "must be set when tp_world > 1");
    if (!g.tp_best) throw bad_field("tp_best", "must be set when tp_world > 1");
    if (g.tp_rank < 0 || g.tp_rank >= g.tp_world) throw bad_field("tp_rank", "must be in [0, tp_world)");
    if (g.tp_slot_tokens < 1) throw bad_field("tp_slot_tokens", "must be >= 1 when tp_world > 1");
    if (g.tp_flag_chunks < 1) throw bad_field("tp_flag_chunks", "must be >= 1 when tp_world > 1");
    if (g.tp_ll_tokens < 0) throw bad_field("tp_ll_tokens", "must be >= 0");
  }
  const size_t smem = mk::vm::SharedPlan::total;
  using mk::vm::megakernel;
  using KernelFn = void (*)(const Globals);
  const int variant = scalar_field<int>(fields, "variant");
  const KernelFn by_variant[2][mk::vm::NUM_VARIANTS] = {
      {&megakernel<false, mk::vm::VARIANT_GENERAL>, &megakernel<false, mk::vm::VARIANT_BATCH1_SPLIT>,
       &megakernel<false, mk::vm::VARIANT_BATCH1_FUSED>, &megakernel<false, mk::vm::VARIANT_TILES_TALL>},
      {&megakernel<true, mk::vm::VARIANT_GENERAL>, &megakernel<true, mk::vm::VARIANT_BATCH1_SPLIT>,
       &megakernel<true, mk::vm::VARIANT_BATCH1_FUSED>, &megakernel<true, mk::vm::VARIANT_TILES_TALL>}};
  if (variant < 0 || variant >= mk::vm::NUM_VARIANTS)
    throw std::invalid_argument("megakernel launch: 'variant' must be 0, 1, 2 or 3");
  const KernelFn kernel = by_variant[g.timing ? 1 : 0][variant];
  MK_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  const bool pdl = fields.contains("pdl") && fields["pdl"].cast<int>() != 0;
  mk::tk::launch_maybe_pdl(kernel, dim3(grid), dim3(mk::vm::BLOCK_THREADS), smem,
                           reinterpret_cast<cudaStream_t>(stream), pdl, g);
}

// W_o [layers x hidden, n_heads x head_dim] in boxes of BOX_ROWS x PANEL_COLS with the 128-byte swizzle, for
// the fused op's panel pages (panel_pages.cuh), copied to dst (device memory, 64-byte aligned, 128 bytes).
// False, writing nothing, where head_dim is not whole panels.
bool encode_w_o_map(uintptr_t dst, uintptr_t w_o, int layers, int hidden, int n_heads, int head_dim) {
  if (head_dim % mk::vm::PANEL_COLS != 0) return false;
  if (dst % 64 != 0) throw std::invalid_argument("encode_w_o_map: dst must be 64-byte aligned");
  const uint64_t rows = (uint64_t)layers * hidden, cols = (uint64_t)n_heads * head_dim;
  const CUtensorMap map = mk::tk::make_tensor_map_2d(reinterpret_cast<const mk::vm::bf16*>(w_o), rows, cols, cols,
                                                     mk::vm::BOX_ROWS, mk::vm::PANEL_COLS, CU_TENSOR_MAP_SWIZZLE_128B);
  MK_CUDA_CHECK(cudaMemcpy(reinterpret_cast<void*>(dst), &map, sizeof(map), cudaMemcpyHostToDevice));
  return true;
}

// TILE_MATMUL's maps (tile_matmul.cuh TileMapIndex) to dst (device memory, 64-byte aligned, NUM_TILE_MAPS maps):
// the four layer-stacked matrices and the LM head in boxes of TILE_W_BOX_ROWS x TILE_K bf16, then the stream's bf16
// activations (`tokens` rows) in boxes of TILE_TOKENS x TILE_K, then the same in boxes of TILE_SMALL_TOKENS x TILE_K,
// all with the 128-byte swizzle.
void encode_tile_maps(uintptr_t dst, const py::dict& d, int layers, int hidden, int intermediate, int qkv_rows,
                      int q_cols, int vocab, int tokens) {
  using mk::vm::bf16;
  if (dst % 64 != 0) throw std::invalid_argument("encode_tile_maps: dst must be 64-byte aligned");
  const auto ptr = [&](const char* name) { return reinterpret_cast<const void*>(d[name].cast<uintptr_t>()); };
  const auto weights = [&](const char* name, uint64_t rows, uint64_t cols) {
    return mk::tk::make_tensor_map_2d(static_cast<const bf16*>(ptr(name)), rows, cols, cols, mk::vm::TILE_W_BOX_ROWS,
                                      mk::vm::TILE_K, CU_TENSOR_MAP_SWIZZLE_128B);
  };
  const auto acts_bf16 = [&](const char* name, uint64_t cols, uint32_t box_rows) {  // a K step of box_rows tokens
    return mk::tk::make_tensor_map_2d(static_cast<const bf16*>(ptr(name)), (uint64_t)tokens, cols, cols, box_rows,
                                      mk::vm::TILE_K, CU_TENSOR_MAP_SWIZZLE_128B);
  };
  CUtensorMap maps[mk::vm::NUM_TILE_MAPS];
  const uint64_t L = layers;
  maps[mk::vm::TILE_QKV] = weights("w_qkv", L * qkv_rows, hidden);
  maps[mk::vm::TILE_O] = weights("w_o", L * hidden, q_cols);
  maps[mk::vm::TILE_GATE_UP] = weights("w_gate_up", L * 2 * intermediate, hidden);
  maps[mk::vm::TILE_DOWN] = weights("w_down", L * hidden, intermediate);
  maps[mk::vm::TILE_LM_HEAD] = weights("lm_head", vocab, hidden);
  for (const int small : {0, 1}) {
    const int at = small * mk::vm::TILE_MAP_SMALL_OFFSET;
    const uint32_t rows = small ? mk::vm::TILE_SMALL_TOKENS : mk::vm::TILE_TOKENS;
    maps[mk::vm::TILE_MAP_X_BF16 + at] = acts_bf16("x_bf16", hidden, rows);
    maps[mk::vm::TILE_MAP_X_ATTN_OUT + at] = acts_bf16("attn_bf16", q_cols, rows);
    maps[mk::vm::TILE_MAP_X_ACT + at] = acts_bf16("act_bf16", intermediate, rows);
  }
  MK_CUDA_CHECK(cudaMemcpy(reinterpret_cast<void*>(dst), maps, sizeof(maps), cudaMemcpyHostToDevice));
}

void advance(uintptr_t step_args, uintptr_t out_tokens, uintptr_t history, int step, uintptr_t error,
             int num_seqs, uintptr_t stream, bool pdl, uintptr_t run_stop) {
  if (num_seqs < 1 || num_seqs > 1024) throw std::invalid_argument("advance: num_seqs must be in [1, 1024]");
  if (step < 0) throw std::invalid_argument("advance: step must be >= 0");
  mk::tk::launch_maybe_pdl(&mk::vm::advance_decode, dim3(1), dim3(num_seqs), 0, reinterpret_cast<cudaStream_t>(stream),
                           pdl, reinterpret_cast<int*>(step_args), reinterpret_cast<const int*>(out_tokens),
                           reinterpret_cast<int*>(history), step, reinterpret_cast<int*>(error),
                           reinterpret_cast<int*>(run_stop));
}

void sample_rows(const py::dict& d, int rows, uintptr_t stream) {
  using namespace mk::sampling;
  if (rows < 1) throw std::invalid_argument("sample_rows: rows must be >= 1");
  SampleArgs a{};
  a.logits = ptr_field<const float>(d, "logits");
  a.vocab = scalar_field<int>(d, "vocab");
  a.logits_stride = scalar_field<int>(d, "logits_stride");
  a.greedy = ptr_field<const uint8_t>(d, "greedy");
  a.temperature = ptr_field<const float>(d, "temperature");
  a.log_min_p = ptr_field<const float>(d, "log_min_p");
  a.top_k = ptr_field<const int64_t>(d, "top_k");
  a.top_p = ptr_field<const float>(d, "top_p");
  a.repetition = ptr_field<const double>(d, "repetition");
  a.frequency = ptr_field<const double>(d, "frequency");
  a.presence = ptr_field<const double>(d, "presence");
  a.keys = ptr_field<const int64_t>(d, "keys");
  a.counters = ptr_field<int64_t>(d, "counters");
  a.counts = ptr_field<int>(d, "counts", /*optional=*/true);
  a.seen = ptr_field<uint8_t>(d, "seen", /*optional=*/true);
  a.out_ids = ptr_field<int>(d, "out_ids");
  a.out_valid = ptr_field<uint8_t>(d, "out_valid");
  a.run_stop = ptr_field<int>(d, "run_stop", /*optional=*/true);
  a.run_step = a.run_stop ? scalar_field<int>(d, "run_step") : 0;
  a.step_args = ptr_field<int>(d, "step_args", /*optional=*/true);
  a.step_error = a.step_args ? ptr_field<int>(d, "step_error") : nullptr;
  if (a.vocab < 1 || a.logits_stride < a.vocab) throw std::invalid_argument("sample_rows: bad vocab or stride");
  if ((a.counts == nullptr) != (a.seen == nullptr))
    throw std::invalid_argument("sample_rows: counts and seen come together");
  if (a.vocab > SAMPLE_MAX_VOCAB) throw std::invalid_argument("sample_rows: vocab exceeds SAMPLE_MAX_VOCAB");
  if (a.run_stop && a.run_step < 0) throw std::invalid_argument("sample_rows: 'run_step' must be >= 0");
  const size_t smem = sample_smem_bytes(a.vocab);
  MK_CUDA_CHECK(cudaFuncSetAttribute(&mk::sampling::sample_rows, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  const bool pdl = d.contains("pdl") && d["pdl"].cast<int>() != 0;
  mk::tk::launch_maybe_pdl(&mk::sampling::sample_rows, dim3(rows * CLUSTER_BLOCKS), dim3(SAMPLE_THREADS), smem,
                           reinterpret_cast<cudaStream_t>(stream), pdl, a);
}

}  // namespace

PYBIND11_MODULE(mk_interpreter, m) {
  m.doc() = "The persistent megakernel interpreter (see docs/INSTRUCTIONS.md).";
  m.def("launch", &launch, py::arg("fields"), py::arg("grid"), py::arg("stream"),
        "Launch one step: fields maps every Globals member to a device pointer (int) or a scalar.");
  m.def("advance", &advance, py::arg("step_args"), py::arg("out_tokens"), py::arg("history"), py::arg("step"),
        py::arg("error"), py::arg("num_seqs"), py::arg("stream"), py::arg("pdl") = false, py::arg("run_stop") = 0,
        "Decode-loop glue: feed sampled ids back into the step args and advance positions/slots; with run_stop (a "
        "run's stop state, run_stop.cuh) check the ids, and do nothing once the run stopped at an earlier step.");
  m.def("sample_rows", &sample_rows, py::arg("fields"), py::arg("rows"), py::arg("stream"),
        "One sampling step over `rows` logits rows (csrc/interpreter/sampling/sample_rows.cuh); fields maps each SampleArgs "
        "member to a device pointer (int) or a scalar; with step_args (and step_error) it also advances the decode "
        "step's args from the drawn ids (the advance kernel's work); pdl=1 launches it with PDL.");
  m.def("encode_w_o_map", &encode_w_o_map, py::arg("dst"), py::arg("w_o"), py::arg("layers"), py::arg("hidden"),
        py::arg("n_heads"), py::arg("head_dim"),
        "Write W_o's tensor map for the fused op's panel pages to dst (device, 128 bytes); False if head_dim is "
        "not a multiple of 64.");
  m.def("encode_tile_maps", &encode_tile_maps, py::arg("dst"), py::arg("buffers"), py::arg("layers"),
        py::arg("hidden"), py::arg("intermediate"), py::arg("qkv_rows"), py::arg("q_cols"), py::arg("vocab"), py::arg("tokens"),
        "Write TILE_MATMUL's tensor maps to dst (device, TILE_MAPS_BYTES): buffers maps w_qkv, w_o, w_gate_up, w_down, "
        "lm_head, x_bf16, attn_bf16 and act_bf16 to device pointers; tokens: the activations' rows.");
  m.attr("TILE_MAPS_BYTES") = (int)(mk::vm::NUM_TILE_MAPS * sizeof(CUtensorMap));
  m.attr("SAMPLE_MAX_VOCAB") = mk::sampling::SAMPLE_MAX_VOCAB;
  m.attr("FORMAT_VERSION") = mk::vm::FORMAT_VERSION;
  m.attr("PAGE_BYTES") = mk::vm::PAGE_BYTES;
  m.attr("MIN_RING_PAGES") = mk::vm::MIN_RING_PAGES;
  m.attr("MAX_RING_PAGES") = mk::vm::MAX_RING_PAGES;
  m.attr("X_FLOATS") = mk::vm::X_FLOATS;
  m.attr("OUT_FLOATS") = mk::vm::OUT_FLOATS;
  m.attr("MMA_CHUNK") = mk::vm::MMA_CHUNK;  // row elements per batch-1 tensor-core step (dot_rows_mma.cuh)
  m.attr("SHORT_ROW_MAX_K") = mk::vm::SHORT_ROW_MAX_K;  // longest row of the short-row path (dot_short_rows.cuh)
  m.attr("MAX_TOKENS_PER_MATVEC") = mk::vm::MAX_TOKENS_PER_MATVEC;
  m.attr("MAX_TOKEN_GROUP") = mk::vm::MAX_TOKEN_GROUP;
  m.attr("MAX_TOKENS_PER_STEP") = mk::vm::MAX_TOKENS_PER_STEP;
  m.attr("X_ROW_SKEW") = mk::vm::X_ROW_SKEW;  // padding between bf16 x rows (activations.cuh x_pitch)
  m.attr("MAX_GQA") = mk::vm::MAX_GQA;
  {  // the tensor-core attention's shared rows by the head dims it runs (attention_tiles.cuh tile_scratch_rows)
    py::dict rows;
    for (int hd : {64, 128}) rows[py::int_(hd)] = mk::vm::tile_scratch_rows(hd);
    m.attr("ATTN_TILE_ROWS") = rows;
  }
  m.attr("ATTN_TILE_SKEW") = mk::vm::TILE_SKEW;
  m.attr("NUM_CONSUMER_WARPS") = mk::vm::NUM_CONSUMER_WARPS;
  m.attr("SHARED_BYTES") = mk::vm::SharedPlan::total;
  m.attr("ERR_WORDS") = mk::vm::ERR_WORDS;
  m.attr("TIMING_WORDS") = mk::vm::TIMING_WORDS;
  m.attr("TIMING_MARK0") = mk::vm::TIMING_MARK0;
  m.attr("PROGRESS_WORDS") = mk::vm::PROGRESS_WORDS;
  m.attr("RS_HEADER_WORDS") = mk::vm::RS_HEADER_WORDS;  // the run stop state's layout (engine/run_stops.py)
  m.attr("RS_ROW_WORDS") = mk::vm::RS_ROW_WORDS;
}
