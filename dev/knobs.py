"""The lab's way to set the cuda backend's options: MEGAKERNEL_* environment variables, read by the dev/ scripts
(sweeps, A/Bs, sanitizer and profiling runs) so that one setting reaches every process of a run. The product
takes the same options as arguments (`--kernel-option NAME=VALUE`, engine/cuda/backend_options.py); values
parse the same way (flags only 0 or 1)."""
from __future__ import annotations

from collections.abc import Mapping

from engine.cuda.backend_options import parse_value

# env var -> CudaBackend keyword
KNOBS: dict[str, str] = {
    "MEGAKERNEL_POLICY": "policy",  # rr | lpt | dynamic
    "MEGAKERNEL_WAVES": "waves",  # instructions per op ≈ waves x SMs
    "MEGAKERNEL_L2_PREFETCH_KB": "l2_prefetch_kb",  # controller: first KB of each instruction
    "MEGAKERNEL_L2_BEYOND_RING_KB": "l2_beyond_ring_kb",  # loader: KB past the ring
    "MEGAKERNEL_L2_BEYOND_RING_OPS": "l2_beyond_ring_ops",  # comma-separated opcode names
    "MEGAKERNEL_MAX_INFLIGHT_PAGES": "max_inflight_pages",  # 0: the whole ring
    "MEGAKERNEL_MAX_RING_PAGES": "max_ring_pages",
    "MEGAKERNEL_ATTN_HEAD_CHUNKS": "max_attn_head_chunks",
    "MEGAKERNEL_ATTN_SPLITS": "max_attn_splits",
    "MEGAKERNEL_MLP_SLICES": "mlp_slices",  # K-slices of the intermediate dim (down waits per slice)
    "MEGAKERNEL_FUSE_O_PROJ": "fuse_o_proj",  # batch-1 ATTN_O_PROJ (0: ATTN_PARTIAL + O-proj)
    "MEGAKERNEL_FUSE_MAX_CONTEXT_PAGES": "fuse_max_context_pages",  # longest context fused (pages)
    "MEGAKERNEL_FUSED_HEAD_CHUNKS": "fused_head_chunks",  # ATTN_O_PROJ head ranges per KV group
    "MEGAKERNEL_ATTN_KV_RING": "attn_kv_ring",  # decode attention's earlier keys through the ring
    "MEGAKERNEL_DEFER_FREE_PAGES": "defer_free_pages",  # an op's last N pages freed after its release
    "MEGAKERNEL_CHAIN_INFLIGHT_PAGES": "chain_inflight_pages",  # cap while QKV/attention/O-proj run
    "MEGAKERNEL_CHAIN_CAP_AHEAD": "chain_cap_ahead",  # ... for instructions this many past the running one
    "MEGAKERNEL_LOW_CAP_INPUTS": "low_cap_inputs",  # ... and while any op reads its input
    "MEGAKERNEL_MMA_MATVEC": "mma_matvec",  # batch-1 page matvecs on the tensor cores
    "MEGAKERNEL_W_O_PANELS": "w_o_panels",  # fused ATTN_O_PROJ: W_o as 2-D TMA panels
    "MEGAKERNEL_PDL": "pdl",  # each step launched with programmatic dependent launch
    "MEGAKERNEL_FOLD_ADVANCE": "fold_advance",  # on-device loops: ARGMAX_REDUCE feeds the id back
    "MEGAKERNEL_FOLD_EMBED": "fold_embed",  # ... and writes its embedding (the stream has no EMBED)
    "MEGAKERNEL_BATCH1_KERNEL": "batch1_kernel",  # batch-1 decode on the kernel variant with its paths only
    "MEGAKERNEL_TIMEOUT_NS": "timeout_ns",  # the watchdog's base limit (racecheck slows a step past the default)
}


def backend_knobs(environ: Mapping[str, str]) -> dict[str, object]:
    """CudaBackend keywords for the knobs set in `environ`; a malformed value is an error naming the variable."""
    out: dict[str, object] = {}
    for var, name in KNOBS.items():
        if var in environ:
            try:
                out[name] = parse_value(name, environ[var])
            except ValueError as exc:
                raise ValueError(f"{var}={environ[var]!r}: {exc}") from exc
    return out

