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
    start = np.zeros(n, np.int64)
    cursor = {s: base + int(rng.integers(0, 2000)) for s in range(num_sms)}
    for i in range(n):
        s = int(sm[i])
        start[i] = cursor[s]
        step = int(dur[i] * rng.uniform(0.4, 0.9)) if overlap and rng.random() < 0.5 else int(dur[i])
        cursor[s] = start[i] + step + int(rng.integers(0, 300))
    wait = rng.integers(0, 400, size=n).astype(np.int64)
    moved = rng.integers(1 << 10, 1 << 20, size=n).astype(np.int64)
    return ProfileRecord(words=words, sm=sm, start_ns=start, end_ns=start + dur, wait_ns=wait,
                         opcode_names=OPCODE_NAMES, simulated=simulated, bytes_moved=moved,
                         meta={"model": "synthetic", "backend": "vm", "batch": 4, "num_sms": num_sms},
                         operand_names=OPERAND_NAMES)
