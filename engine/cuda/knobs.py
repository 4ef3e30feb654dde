"""Experiment knobs of the cuda backend read from the environment, for `megakernel bench` and
`megakernel profile` alike (so a profile shows the configuration a bench measured). Defaults are the
engine's; docs/BENCHMARKS.md records what each knob measured."""
from __future__ import annotations

from collections.abc import Callable, Mapping


def _ops(text: str) -> tuple[str, ...]:
    return tuple(n for n in text.split(",") if n)


def _flag(text: str) -> bool:
    # Only "0" / "1": a typo such as "ture" must not silently pick one side of an A/B.
    if text not in ("0", "1"):
        raise ValueError("expected 0 or 1")
    return text == "1"


# env var -> (CudaBackend keyword, parser)
KNOBS: dict[str, tuple[str, Callable[[str], object]]] = {
    "MEGAKERNEL_WAVES": ("waves", float),  # instructions per op ≈ waves x SMs
    "MEGAKERNEL_L2_PREFETCH_KB": ("l2_prefetch_kb", int),  # controller: first KB of each instruction
    "MEGAKERNEL_L2_BEYOND_RING_KB": ("l2_beyond_ring_kb", int),  # loader: KB past the ring
    "MEGAKERNEL_L2_BEYOND_RING_OPS": ("l2_beyond_ring_ops", _ops),  # comma-separated opcode names
    "MEGAKERNEL_MAX_INFLIGHT_PAGES": ("max_inflight_pages", int),  # 0: the whole ring
    "MEGAKERNEL_MAX_RING_PAGES": ("max_ring_pages", int),
    "MEGAKERNEL_ATTN_HEAD_CHUNKS": ("max_attn_head_chunks", int),
    "MEGAKERNEL_ATTN_SPLITS": ("max_attn_splits", int),
    "MEGAKERNEL_MLP_SLICES": ("mlp_slices", int),  # K-slices of the intermediate dim (down waits per slice)
    "MEGAKERNEL_FUSE_O_PROJ": ("fuse_o_proj", _flag),  # batch-1 ATTN_O_PROJ (0: ATTN_PARTIAL + O-proj)
    "MEGAKERNEL_FUSE_MAX_CONTEXT_PAGES": ("fuse_max_context_pages", int),  # longest context fused (pages)
    "MEGAKERNEL_FUSED_HEAD_CHUNKS": ("fused_head_chunks", int),  # ATTN_O_PROJ head ranges per KV group
    "MEGAKERNEL_ATTN_KV_RING": ("attn_kv_ring", _flag),  # decode attention's earlier keys through the ring
    "MEGAKERNEL_DEFER_FREE_PAGES": ("defer_free_pages", int),  # an op's last N pages freed after its release
    "MEGAKERNEL_CHAIN_INFLIGHT_PAGES": ("chain_inflight_pages", int),  # cap while QKV/attention/O-proj run
    "MEGAKERNEL_CHAIN_CAP_AHEAD": ("chain_cap_ahead", int),  # ... for instructions this many past the running one
    "MEGAKERNEL_LOW_CAP_INPUTS": ("low_cap_inputs", _flag),  # ... and while any op reads its input
    "MEGAKERNEL_MMA_MATVEC": ("mma_matvec", _flag),  # batch-1 page matvecs on the tensor cores
    "MEGAKERNEL_W_O_PANELS": ("w_o_panels", _flag),  # fused ATTN_O_PROJ: W_o as 2-D TMA panels
    "MEGAKERNEL_PDL": ("pdl", _flag),  # each step launched with programmatic dependent launch
    "MEGAKERNEL_FOLD_ADVANCE": ("fold_advance", _flag),  # on-device loops: ARGMAX_REDUCE feeds the id back
    "MEGAKERNEL_FOLD_EMBED": ("fold_embed", _flag),  # ... and writes its embedding (the stream has no EMBED)
    "MEGAKERNEL_BATCH1_KERNEL": ("batch1_kernel", _flag),  # batch-1 decode on the kernel variant with its paths only
}


def backend_knobs(environ: Mapping[str, str]) -> dict[str, object]:
    """CudaBackend keywords for the knobs set in `environ` (MEGAKERNEL_POLICY is the `policy` argument);
    a malformed value is an error naming the variable."""
    out: dict[str, object] = {}
    if "MEGAKERNEL_POLICY" in environ:
        out["policy"] = environ["MEGAKERNEL_POLICY"]
    for var, (name, parse) in KNOBS.items():
        if var in environ:
            try:
                out[name] = parse(environ[var])
            except ValueError as exc:
                raise ValueError(f"{var}={environ[var]!r}: {exc}") from exc
    return out
