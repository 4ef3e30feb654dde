// globals.cuh: every buffer and dimension the interpreter reads, passed by value as one kernel
// parameter. The host fills it by field name (interpreter.cu), so Python never depends on order.
#pragma once

#include <cuda.h>  // CUtensorMap (a type only: no driver symbols are linked)
#include <cuda_bf16.h>
#include <cstdint>

#include "opcodes.cuh"

namespace mk::vm {

using bf16 = __nv_bfloat16;

struct Globals {
  // packed weights (engine/instructions/packing.py)
  const bf16* embed;
  const bf16* attn_norm;
  const bf16* w_qkv;
  const bf16* w_o;
  const bf16* mlp_norm;
  const bf16* w_gate_up;
  const bf16* w_down;
  const bf16* final_norm;
  const bf16* lm_head;
  const float* rope_inv_freq;
  // nullptr, or the per-row scales of an fp8 matrix: the matrix's pointer above then holds e4m3 bytes
  // (engine/instructions/fp8_packing.py; per output channel) and its pages are streamed as fp8 (weight_stream.cuh)
  const float* w_qkv_scale;
  const float* w_o_scale;
  const float* w_gate_up_scale;
  const float* w_down_scale;
  const float* lm_head_scale;
  // W_o as 2-D boxes for ATTN_O_PROJ's panel pages (panel_pages.cuh), in global memory, encoded once by the
  // host (encode_w_o_map); nullptr: the fused op copies W_o rows one by one.
  const CUtensorMap* w_o_map;
  // TILE_MATMUL's tensor maps (tile_matmul.cuh TileMapIndex: the four layer matrices and the LM head, then the
  // stream's hidden, attention output and act), in global memory, encoded per stream by the host (encode_tile_maps);
  // nullptr: the stream has no tiles.
  const CUtensorMap* tile_maps;
  // paged KV cache [L, num_pages, n_kv, page_size, head_dim]
  bf16* k_cache;
  bf16* v_cache;
  // activations (fp32) and outputs
  float* hidden;
  float* mid;
  float* q;
  float* attn_out;
  float* o_part;
  float* lse_part;
  float* act;
  // TILE_MATMUL's bf16 inputs (ops/tile_matmul.cuh): the NORM tiles' normalised hidden, the attention output (written
  // next to attn_out by the attention ops: O's tiles), the GATE_UP tiles' act
  bf16* x_bf16;
  bf16* attn_bf16;
  bf16* act_bf16;
  float* logits;
  float* lm_max;
  int* lm_arg;
  int* out_tokens;
  // synchronisation and the program
  int* counters;
  const int* counter_period;
  int* queue_head;
  const int* step_args;
  int sa_header[SA_HEADER_WORDS];  // = step_args[0:SA_HEADER_WORDS], fixed per stream (state.cuh)
  const int* instructions;  // static: [grid, queue_len, 32]; dynamic: [queue_len, 32]
  int* error;               // [ERR_WORDS]
  long long* timing;        // [num_instructions, TIMING_WORDS] or nullptr
  int* progress;            // [grid, PROGRESS_WORDS]: where each block is (post-mortem of a failure)
  // nullptr, or an on-device decode loop's token history at this step's row: ARGMAX_REDUCE then also feeds
  // the sampled ids into step_args for the next launch (advance.cuh), instead of a kernel of its own.
  int* advance_history;
  // nullptr, or the stop state of the run of decode steps this launch belongs to (run_stop.cuh): the launch does
  // no work once the run stopped at an earlier step, and with advance_history ARGMAX_REDUCE checks its ids.
  int* run_stop;
  // Tensor parallelism (TP_ALLREDUCE, ops/tp_allreduce.cuh): device arrays of tp_world pointers, rank q's exchange
  // memory as mapped in this process (CUDA IPC over NVLink; engine/cuda/tp_peers.py), nullptr without tensor
  // parallelism. tp_send[q]: rank q's send slots, float [2][tp_slot_tokens][hidden_size]; tp_flags[q]: rank q's
  // publish counts, int [(2 * layers + 1) * tp_flag_chunks * tp_world] (the last index: TP_ARGMAX's), zeroed by the
  // host once and only ever raised.
  float* const* tp_send;
  int* const* tp_flags;
  int tp_rank;         // this process's rank, 0 .. tp_world - 1
  int tp_world;        // ranks in the group (1: no tensor parallelism), at most MAX_TP_RANKS
  int tp_slot_tokens;  // rows of a send slot: a step's tokens at most
  int tp_flag_chunks;  // column chunks of one all-reduce the flags have room for
  // Steps of at most tp_ll_tokens tokens (decode) take the push path instead: tp_recv[q], rank q's receive slots,
  // uint64 [2][tp_world][tp_ll_tokens][hidden_size], each word a value and the tag of the all-reduce that wrote it.
  // 0 / nullptr: every step takes the send-slot path.
  unsigned long long* const* tp_recv;
  int tp_ll_tokens;
  // TP_ARGMAX (ops/tp_argmax.cuh): tp_best[q], rank q's rows of every rank's best logit and id per sequence, uint64
  // [tp_world][tp_slot_tokens][2], each word a value and the tag of the step that wrote it.
  unsigned long long* const* tp_best;
  // scalars
  int run_step;      // with run_stop: this launch's step in its run (0, 1, ...)
  int num_counters;  // entries of counters / counter_period (a skipped launch moves each one period on)
  long long timeout_ns;
  int l2_prefetch_bytes;  // per fetched instruction, by the controller (l2_prefetch.cuh)
  int l2_beyond_ring_bytes;  // per instruction past what the ring holds, by the loader (l2_prefetch.cuh)
  int l2_beyond_ring_ops;    // bit (1 << opcode): the opcodes that get the loader's prefetch
  int max_inflight_pages;    // the loader keeps at most this many page copies outstanding (0: no cap)
  int ring_pages;            // weight-ring pages, MIN_RING_PAGES..MAX_RING_PAGES (config.cuh)
  int attn_kv_ring;          // 1: decode attention streams its earlier keys through the ring (kv_stream.cuh)
  int defer_free_pages;      // an op's last this-many ring pages are freed after its release (consumer.cuh)
  int low_cap_inputs;        // 1: the low cap also while any op reads its input (state.cuh set_low_cap_from)
  int mma_matvec;            // 1: batch-1 page matvecs on the tensor cores (dot_rows_mma.cuh)
  int mma_x_rows;            // ... for at most this many x rows: MAX_TOKEN_GROUP, or 1 where the matrices are fp8
  int token_group;           // activation rows per matvec pass of a step of several tokens (token_groups.cuh)
  int lm_head_direct;        // 1: an LM head of one token group of sequences writes its logits directly (ops/lm_head.cuh)
  int attn_tiles;            // 1: many-query attention on the tensor cores (attention_tiles.cuh)
  int tile_page_pairs;       // 1: tiles of a bf16 input take their K steps two at a time (tile_matmul.cuh)
  int tile_small_x;          // 1: narrow tiles of <= TILE_SMALL_TOKENS tokens stage x in small boxes (tile_streams.cuh)
  int tile_pack_k;           // 1: narrow tiles of <= TILE_PACK_ROWS rows pack several K steps per page (tile_streams.cuh)
  int attn_kv_buffers;       // K / V tile buffers of the tensor-core attention for heads up to 64 dims: 2 or 4
  int attn_head_units;       // 1: ring attention of at most a page a warp folds by (KV page, head) (attention_ring.cuh)
  int chain_inflight_pages;  // the cap while the consumers run QKV / attention / O-proj (0: max_inflight_pages)
  int chain_cap_ahead;       // ... for the pages of instructions this many or more past the running one (state.cuh)
  int embed_next;            // with advance_history: the next step has no EMBED, ARGMAX_REDUCE writes its hidden
  int queue_len;
  int dynamic_queue;
  int epoch;
  int hidden_size;
  int intermediate;
  int layers;
  int n_heads;
  int n_kv;
  int head_dim;        // the stored width of a head (32 x dims per lane); every buffer and the KV cache use it
  int model_head_dim;  // the checkpoint's head dim (<= head_dim, the rest zero): the softmax scale
  int vocab;
  int kv_num_pages;
  int gu_tile;
  int lm_blocks;
  float eps;
};

}  // namespace mk::vm
