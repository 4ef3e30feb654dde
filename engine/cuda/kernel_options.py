"""Launch-time options of the interpreter kernel: how the loader streams and when pages are freed. None of
them changes the instruction tensors (the VM runs the same program whatever they are), so they live beside
the stream rather than in the scheduler's SplitParams. This is the one table of the kernel's defaults; each
was measured by a same-run A/B (ms/token of batch-1 decode on the bench's on-device loop; the design decisions
in docs/PERFORMANCE.md), and each can be set per run with `--kernel-option NAME=VALUE` of `megakernel bench` /
`profile` (engine/cuda/backend_options.py). The defaults that depend on the GPU's memory bandwidth are None
here and resolved per device (engine/cuda/device_tuning.py)."""
from __future__ import annotations

from dataclasses import dataclass, fields

from engine.instructions.registry import opcode_mask

# L2 prefetch (csrc/interpreter/l2_prefetch.cuh): the controller pulls the first `l2_prefetch_kb` of each
# instruction it fetches, the loader the `l2_beyond_ring_kb` past the ring. Off: both measured slower (1B on an
# H200: 1.39 -> 1.32 ms/token without the controller's 96 KiB, 1.30 -> 1.13 without the loader's 256 KiB);
# prefetches queue in front of the latency-bound loads of the critical path.
DEFAULT_L2_PREFETCH_KB = 0
DEFAULT_L2_BEYOND_RING_KB = 0
# Opcodes whose weights get the loader's prefetch past the ring: gate/up is the one the loader reaches
# while QKV, attention and O-proj (latency-bound, little streaming) run.
DEFAULT_L2_BEYOND_RING_OPS: tuple[str, ...] = ("RMS_GATE_UP_SILU",)
# Weight-page copies each SM's loader keeps in flight (0: as many as the ring holds). Past the bandwidth-delay
# product more outstanding copies only lengthen the queues the critical path's reads wait in (H200: the whole
# ring in flight 1.007 ms/token, a cap of 3 0.973, 4 0.990, 6 1.005). The best cap grows with the memory
# bandwidth, so None: the device's (device_tuning.py).
DEFAULT_MAX_INFLIGHT_PAGES: int | None = None
# ... in a stream with tiles (TILE_MATMUL; None: the cap above): no cap. Tiles stream whole K-step pages a few
# microseconds long, not a batch-1 op's latency-bound chain, and measured faster without one each time (1B, H200, no cap
# against 4, two rounds each: batch 16 / 32 / 64 1.606-1.624 / 1.873-1.937 / 2.493-2.518 against 1.634-1.656 /
# 1.906-1.946 / 2.561-2.586 ms per step, the 2 048-token prefill 21.44-21.66 against 21.24-22.50 ms; on an earlier
# build batch 32 / 64 2.076 / 2.424 against 2.150 / 2.513).
DEFAULT_TILE_INFLIGHT_PAGES: int | None = 0
# While the consumers run QKV / attention / O-proj the loader keeps a lower cap (the MLP's next pages): a cap
# of 2 throughout is 1-2 % slower on the 1B and 8B shapes than the higher cap with this one. Its best value
# also differs by device (2 on the H200, 1 on the H100), so None: the device's (device_tuning.py). 0: the same
# cap throughout.
DEFAULT_CHAIN_INFLIGHT_PAGES: int | None = None
# ... but only for the pages of instructions this many past the one the consumers run: an op's own pages,
# which it waits for, go at the streaming cap (0: every page). The 8B shape's QKV slice (23 pages per SM) is
# larger than the ring, and at 0 its own pages streamed one at a time: 8B 4.167 -> 4.075 ms/token on an H200
# (every round); 1B unchanged (0.807 vs 0.807; 2: 0.806).
DEFAULT_CHAIN_CAP_AHEAD = 1
# ... and while gate/up, down and the LM head read their inputs (copies started in the previous op's freed
# pages otherwise slow that read): 1.011 vs 1.022 ms/token on the 1B shape, 5.576 vs 5.648 on the 8B (H100).
DEFAULT_LOW_CAP_INPUTS = True
# Decode attention streams the group's earlier keys and values through the weight ring (kv_stream.cuh), so
# after its wait it reads only the queries and the new key: -3.7 % per token (H100).
DEFAULT_ATTN_KV_RING = True
# An op's last ring pages are freed after its release (csrc/interpreter/consumer.cuh): its release fence
# then does not wait behind new weight copies. At most one page per consumer warp, and below the smallest ring
# (9 pages), so no page an op needs waits on a held one.
MAX_DEFER_FREE_PAGES = 8
# The most allowed: 1.051 against 1.099 ms/token with 0 on an H100 (4: 1.076).
DEFAULT_DEFER_FREE_PAGES = MAX_DEFER_FREE_PAGES
# Batch-1 page matvecs on the tensor cores (csrc/interpreter/dot_rows_mma.cuh; x rounded to bf16 for them):
# one warp's 16 KB page takes 1.0-1.4 µs with CUDA-core FMAs and each op's last page is on its critical path.
# 8B shape 5.668 -> 5.443 ms/token on an H100, 1B 1.030 -> 1.025 (H100) and 0.872 -> 0.868 (H200).
# Off: every matvec on the CUDA cores (fp32 x), as prefill and batch > 1 always are.
DEFAULT_MMA_MATVEC = True
# The fused ATTN_O_PROJ's W_o slices copied as 2-D TMA boxes of 128-byte swizzled panels and multiplied on
# the tensor cores (csrc/interpreter/panel_pages.cuh), where the slice is 64, 128 or 256 columns wide and the
# step has one token; off: one bulk copy per W_o row (128-256 bytes for one head) and the CUDA-core row matvec.
# Only the fused path reads it. 1B on an H200: the fused op with row copies 0.884 ms/token against 0.821 split;
# with panel pages (and the ring attention) 0.806-0.808 against 0.815 split.
DEFAULT_W_O_PANELS = True
# A prompt chunk's attention (16 or more (token, head) rows of one task) on the tensor cores, keys and values
# copied into shared memory once per tile for all of the task's queries (csrc/interpreter/attention_tiles.cuh);
# off: every query walks the keys on the CUDA cores, one query after another (attention_global.cuh).
DEFAULT_ATTN_TILES = True
# Activation rows per matvec pass of a step of several tokens, where every matvec input of the model takes the tensor
# cores (bf16 x) and that many rows fit shared x (engine/cuda/limits.py token_group; at most config.cuh
# MAX_TOKEN_GROUP, at least the CUDA cores' 8): a 1B step of 16 sequences is then one pass over each weight page
# instead of two, with no pages held in the ring between passes.
DEFAULT_MMA_TOKEN_GROUP = 16
# An LM head of 2..token-group sequences (one group on the tensor cores) writes its products straight into the global
# logits, so the host cuts it into about one block per SM instead of out_floats / sequences rows per block (1B, 16
# sequences: 1 002 blocks, each reloading the 16 rows of x with the norm and paying an epilogue: 16 % of the step).
# On: a batch-16 step of the 1B is about 12 % shorter (docs/PERFORMANCE.md, Batched decode); batch 1 never takes it.
DEFAULT_LM_HEAD_DIRECT = True
# Programmatic dependent launch (csrc/tk/grid_dependency.cuh): each step's kernel is launched so that its blocks
# take SMs as the previous kernel's blocks exit and wait in the kernel for it to finish, hiding the launch
# between steps that the host queued back to back (the bench's on-device loop). With fold_advance below:
# 1B 0.811 -> 0.805 ms/token on an H200 (4 rounds; pdl or fold alone within noise, both -0.2 %). Where the host
# waits for each step (serving) it changes nothing.
DEFAULT_PDL = True
# On-device decode loops (the engine's runs of decode steps, CudaBackend.decode_steps, and the bench's kernel-only
# loop) feed each sampled id back inside the step (ARGMAX_REDUCE, advance.cuh) instead of in a one-block kernel
# after it (whose 2.4 µs were on the loop's critical path); off, the engine's runs fall back to one step at a time.
DEFAULT_FOLD_ADVANCE = True
# ... and, with fold_advance, writes the next step's embedding rows into hidden too, so that step's stream has
# no EMBED and its layer 0 starts without a dependency hop (engine/bench/megakernel_runner.py).
DEFAULT_FOLD_EMBED = True
# Batch-1 decode streams run a kernel variant compiled with only their paths (engine/cuda/variant.py): 1B shape
# H200 0.794 -> 0.782 ms/token, H100 0.976 -> 0.952.
DEFAULT_BATCH1_KERNEL = True
# Steps of more tokens than one token group run their linear layers as TILE_MATMUL tiles (csrc/interpreter/
# tile_matmul.cuh): each weight page read once per 64 tokens and multiplied with all of them on the tensor cores,
# instead of the token groups' passes over pages held in the ring. Host-side: it changes the instruction streams
# (SplitParams.tile_min_tokens), so the VM runs the same tiles.
DEFAULT_TILE_MATMUL = True
# ... from this many tokens on, or from one token group more where the group is smaller: a step of 9-16 sequences of
# the 1B is one token group of 16, whose products bound it, and its tiles are faster (H200, same run, two rounds:
# batch 16 1.663 / 1.657 against 1.910 / 1.900 ms per step); a step of 8 is an 8-row group, faster than tiles (1.343 /
# 1.339 against 1.564 / 1.543).
DEFAULT_TILE_MIN_TOKENS = 9
# Tiles of a bf16 input take their K-step pages two at a time (csrc/interpreter/tile_matmul.cuh tile_takes_pairs): one
# CTA barrier, one release round and one group of eight products per pair instead of per page; a page visit's fixed
# work was as long as a narrow tile's products (~0.86 us a page whatever its bytes, 1B, H200, batch 64).
DEFAULT_TILE_PAGE_PAIRS = True
# A narrow tile of at most 32 tokens copies its x in 32-row boxes instead of 64 (csrc/interpreter/tile_streams.cuh
# TILE_SMALL_TOKENS), so its four x stages take 16 KB and the ring a page more (engine/cuda/limits.py _tile_x): a 1B
# decode step of up to 32 sequences runs a 12-page ring instead of 11 (batch 32 measured 2.246 / 2.193 / 2.106 ms at
# 9 / 10 / 11 pages, H200).
DEFAULT_TILE_SMALL_X = True
# A narrow tile of at most 32 weight rows (a decode step's QKV tiles) packs four K steps into each ring page, or two
# where x holds fewer than eight of its stages (csrc/interpreter/tile_streams.cuh tile_pack): more weight bytes in
# flight per ring page (the loader caps pages, not bytes) and a page visit per two or four K steps, each warpgroup
# multiplying half of them. 1B, H200, same run, two rounds: batch 16 1.624 / 1.636 against 1.708 / 1.689 ms per step,
# batch 32 1.919 / 1.914 against 1.966 / 2.001, batch 64 2.630 / 2.555 against 2.648 / 2.598.
DEFAULT_TILE_PACK_K = True
# K / V tiles of the tensor-core prompt attention in shared memory for heads of up to 64 dims (2 or 4; wider heads
# always 2): a tile's copy from L2 takes several times its products, so with two buffers (one tile ahead) the warps
# waited for most of each tile (csrc/interpreter/attention_tiles.cuh).
DEFAULT_ATTN_KV_BUFFERS = 4
# Decode attention over at most one ring page per consumer warp (a context of up to a few hundred tokens) folds by
# (KV page, head) pairs spread over every warp instead of by ring page, each warp one head after another, where that
# shortens the busiest warp's folds (csrc/interpreter/attention_ring.cuh): a 129-256-token context's 9-16 KV pages left
# three warps idle. H200, 1B, two rounds: batch 16 / 32 / 64 2-4 % faster; a third round alike (docs/PERFORMANCE.md).
DEFAULT_ATTN_HEAD_UNITS = True
ATTN_KV_BUFFER_CHOICES = (2, 4)
# Tensor parallelism: steps of at most this many tokens (decode) all-reduce by pushing tagged 8-byte words straight into
# every rank's receive slots (csrc/interpreter/ops/tp_allreduce.cuh, the push path: no fence, no remote load on the
# way); larger steps through send slots and publish counts. 0: every step through the send slots. Host memory for it:
# 2 x ranks x this many tokens x hidden x 8 bytes per rank (engine/cuda/tp_peers.py).
DEFAULT_TP_LL_TOKENS = 16
# Tensor parallelism: a step whose logits nobody reads (greedy) computes each rank's share of the LM head's vocabulary
# and takes the argmax across the ranks (TP_ARGMAX), so a rank reads 1 / N of the LM head; 0: every rank the whole.
DEFAULT_TP_VOCAB_ARGMAX = True


@dataclass(frozen=True)
class KernelOptions:
    l2_prefetch_kb: int = DEFAULT_L2_PREFETCH_KB
    l2_beyond_ring_kb: int = DEFAULT_L2_BEYOND_RING_KB
    l2_beyond_ring_ops: tuple[str, ...] = DEFAULT_L2_BEYOND_RING_OPS
    max_inflight_pages: int | None = DEFAULT_MAX_INFLIGHT_PAGES  # None: the device's (device_tuning.py)
    tile_inflight_pages: int | None = DEFAULT_TILE_INFLIGHT_PAGES  # replaces it in streams with tiles (DeviceStream)
    chain_inflight_pages: int | None = DEFAULT_CHAIN_INFLIGHT_PAGES  # None: the device's (device_tuning.py)
    chain_cap_ahead: int = DEFAULT_CHAIN_CAP_AHEAD
    low_cap_inputs: bool = DEFAULT_LOW_CAP_INPUTS
    max_ring_pages: int | None = None  # None: as many as each stream's inputs leave room for
    attn_kv_ring: bool = DEFAULT_ATTN_KV_RING
    defer_free_pages: int = DEFAULT_DEFER_FREE_PAGES
    mma_matvec: bool = DEFAULT_MMA_MATVEC
    attn_tiles: bool = DEFAULT_ATTN_TILES
    mma_token_group: int = DEFAULT_MMA_TOKEN_GROUP  # host-side: the backend's token group (limits.py token_group)
    lm_head_direct: bool = DEFAULT_LM_HEAD_DIRECT
    w_o_panels: bool = DEFAULT_W_O_PANELS
    pdl: bool = DEFAULT_PDL
    fold_advance: bool = DEFAULT_FOLD_ADVANCE  # read by on-device decode loops (CudaBackend.decode_steps, bench)
    fold_embed: bool = DEFAULT_FOLD_EMBED  # ditto
    batch1_kernel: bool = DEFAULT_BATCH1_KERNEL  # host-side: the backend picks each stream's kernel variant
    tile_matmul: bool = DEFAULT_TILE_MATMUL  # host-side: the backend's SplitParams.tile_min_tokens
    tile_page_pairs: bool = DEFAULT_TILE_PAGE_PAIRS
    tile_small_x: bool = DEFAULT_TILE_SMALL_X  # also host-side: the ring a stream's x stages leave (limits.py)
    tile_pack_k: bool = DEFAULT_TILE_PACK_K
    attn_kv_buffers: int = DEFAULT_ATTN_KV_BUFFERS
    attn_head_units: bool = DEFAULT_ATTN_HEAD_UNITS
    tp_ll_tokens: int = DEFAULT_TP_LL_TOKENS  # tensor parallelism only (engine/cuda/tp_peers.py sizes its slots)
    tp_vocab_argmax: bool = DEFAULT_TP_VOCAB_ARGMAX  # host-side: a tensor-parallel rank's greedy streams

    def __post_init__(self) -> None:
        for name in ("l2_prefetch_kb", "l2_beyond_ring_kb"):
            if not 0 <= getattr(self, name) <= 4096:
                raise ValueError(f"{name} must be in [0, 4096], got {getattr(self, name)}")
        for name in ("max_inflight_pages", "tile_inflight_pages", "chain_inflight_pages", "chain_cap_ahead"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 1 <= self.mma_token_group <= 64:
            raise ValueError(f"mma_token_group must be in [1, 64], got {self.mma_token_group}")
        if not 0 <= self.tp_ll_tokens <= 256:
            raise ValueError(f"tp_ll_tokens must be in [0, 256], got {self.tp_ll_tokens}")
        if self.attn_kv_buffers not in ATTN_KV_BUFFER_CHOICES:
            raise ValueError(f"attn_kv_buffers must be one of {ATTN_KV_BUFFER_CHOICES}, got {self.attn_kv_buffers}")
        if not 0 <= self.defer_free_pages <= MAX_DEFER_FREE_PAGES:
            raise ValueError(f"defer_free_pages must be in [0, {MAX_DEFER_FREE_PAGES}], got {self.defer_free_pages}")
        opcode_mask(self.l2_beyond_ring_ops)  # names an unknown opcode -> ValueError

    @classmethod
    def names(cls) -> frozenset[str]:
        return frozenset(f.name for f in fields(cls))

    def launch_fields(self) -> dict[str, int]:
        """The kernel's Globals scalars these options set, and `pdl`, which the launch reads (max_ring_pages acts on
        the host: limits.py; w_o_panels decides whether the backend encodes W_o's tensor map; fold_advance and
        fold_embed are the decode loop's; batch1_kernel picks the kernel variant per stream: DeviceStream.variant)."""
        for name in ("max_inflight_pages", "chain_inflight_pages"):
            if getattr(self, name) is None:
                raise ValueError(f"{name} is unresolved: CudaBackend sets it for its device (device_tuning.py)")
        return {"l2_prefetch_bytes": self.l2_prefetch_kb * 1024, "l2_beyond_ring_bytes": self.l2_beyond_ring_kb * 1024,
                "l2_beyond_ring_ops": opcode_mask(self.l2_beyond_ring_ops),
                "max_inflight_pages": self.max_inflight_pages, "chain_inflight_pages": self.chain_inflight_pages,
                "chain_cap_ahead": self.chain_cap_ahead,
                "low_cap_inputs": int(self.low_cap_inputs), "attn_kv_ring": int(self.attn_kv_ring),
                "defer_free_pages": self.defer_free_pages, "mma_matvec": int(self.mma_matvec), "attn_tiles": int(self.attn_tiles), "pdl": int(self.pdl),
                "lm_head_direct": int(self.lm_head_direct), "tile_page_pairs": int(self.tile_page_pairs),
                "tile_small_x": int(self.tile_small_x), "tile_pack_k": int(self.tile_pack_k),
                "attn_kv_buffers": self.attn_kv_buffers, "attn_head_units": int(self.attn_head_units)}
