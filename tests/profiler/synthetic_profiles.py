"""Synthetic profile records: random opcodes, random operand words, spans that overlap on an SM."""
from __future__ import annotations

import numpy as np

from profiler.record import ProfileRecord

OPCODE_NAMES = {1: "qkv_rope_append", 2: "attn_partial", 3: "attn_reduce", 4: "o_proj_residual",
                5: "gate_up_silu", 6: "down_proj_residual", 7: "lm_head_argmax"}
OPERAND_NAMES = {op: ["layer", "block", "seq"] for op in OPCODE_NAMES}


def make_record(rng: np.random.Generator, n: int = 500, num_sms: int = 8, width: int = 8,
                simulated: bool = True, overlap: bool = True) -> ProfileRecord:
    """Random record; per SM the instructions are back-to-back with gaps, and with `overlap` each
    next one may start before the previous ends (a pipelined SM)."""
    words = rng.integers(0, 1000, size=(n, width), dtype=np.int32)
    words[:, 0] = rng.integers(1, len(OPCODE_NAMES) + 1, size=n)
    sm = rng.integers(0, num_sms, size=n).astype(np.int32)
    dur = rng.integers(200, 5000, size=n).astype(np.int64)
    base = np.int64(1_700_000_000_000_000_000)  # raw globaltimer-like epoch: must survive int64
    # Per SM, instruction k+1 starts `step` after instruction k: a full duration plus a gap, or
    # (pipelined, with `overlap`) only part of it, so consecutive instructions overlap.
    frac = np.where(overlap & (rng.random(n) < 0.5), rng.uniform(0.4, 0.9, n), 1.0)
    step = (dur * frac).astype(np.int64) + rng.integers(0, 300, n)
    start = np.zeros(n, np.int64)
    for s in range(num_sms):
        idx = np.flatnonzero(sm == s)
        offset = base + int(rng.integers(0, 2000))
        start[idx] = offset + np.concatenate([[0], np.cumsum(step[idx])[:-1]])
    wait = rng.integers(0, 400, size=n).astype(np.int64)
    moved = rng.integers(1 << 10, 1 << 20, size=n).astype(np.int64)
    return ProfileRecord(words=words, sm=sm, start_ns=start, end_ns=start + dur, wait_ns=wait,
                         opcode_names=OPCODE_NAMES, simulated=simulated, bytes_moved=moved,
                         meta={"model": "synthetic", "backend": "vm", "batch": 4, "num_sms": num_sms},
                         operand_names=OPERAND_NAMES)
