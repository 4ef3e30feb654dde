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


def make_chain_record(rng: np.random.Generator, layers: int = 3, width_a: int = 4, width_b: int = 2,
                      num_sms: int = 4, steps: int = 1, marks: bool = True) -> ProfileRecord:
    """Full 32-word instructions with real waits and signals: per layer, `width_a` A's (opcode 1) wait for all
    of the previous layer's B's, then `width_b` B's (opcode 2) wait for all of the layer's A's. Each
    instruction starts on the next free SM when its producers are done, waits a little, and (with `marks`)
    records the GPU's sub-phase marks inside its work (profiler/marks.py: 6 times and a cycle count)."""
    from profiler.record import W_ID, W_LAYER, W_NUM_WAITS, W_SIGNAL, W_SIGNAL_AMOUNT, W_WAITS

    rows: list[tuple[int, int, int, int, int]] = []  # opcode, layer, wait counter, wait target, signal counter
    for layer in range(layers):
        rows += [(1, layer, 2 * layer - 1, width_b, 2 * layer)] * width_a
        rows += [(2, layer, 2 * layer, width_a, 2 * layer + 1)] * width_b
    n1 = len(rows)
    words = np.zeros((n1 * steps, 32), np.int32)
    start, end, wait, sm = (np.zeros(n1 * steps, np.int64) for _ in range(4))
    marks_ns = np.zeros((n1 * steps, 7), np.int64)
    free = np.full(num_sms, 1_000_000, np.int64)  # when each SM is next free
    done: dict[tuple[int, int], int] = {}  # (step, counter) -> its last producer's end
    for i in range(n1 * steps):
        st, k = divmod(i, n1)
        op, layer, c, t, sig = rows[k]
        w = words[i]
        w[0], w[W_ID], w[W_LAYER] = op, k, layer
        w[W_SIGNAL], w[W_SIGNAL_AMOUNT] = sig, 1
        w[W_WAITS : W_WAITS + 10 : 2] = -1
        if c >= 0:
            w[W_NUM_WAITS], w[W_WAITS], w[W_WAITS + 1] = 1, c, t
        s = int(np.argmin(free))
        ready = max(int(free[s]), done.get((st, c), 0))
        sm[i], start[i] = s, int(free[s]) + int(rng.integers(0, 50))
        ready = max(ready, int(start[i])) + int(rng.integers(20, 200))
        wait[i] = ready - start[i]
        work = rng.integers(50, 400, size=5).cumsum()
        end[i] = ready + int(work[-1]) + 50
        # input, last page, computed, loader (its last page issued before the dependencies were met),
        # last page done, first page: in time order input < first page < last page < last done < computed.
        marks_ns[i, :6] = [ready + work[0], ready + work[1], ready + work[3], ready - 30, ready + work[2],
                           ready + (work[0] + work[1]) // 2]
        marks_ns[i, 6] = 900  # cycles, a count
        free[s] = end[i]
        done[(st, sig)] = max(done.get((st, sig), 0), int(end[i]))
        if k == n1 - 1:
            free[:] = free.max() + 100  # the next step starts after the whole step
    return ProfileRecord(words=words, sm=sm.astype(np.int32), start_ns=start, end_ns=end, wait_ns=wait,
                         opcode_names={1: "A", 2: "B"}, simulated=False, marks_ns=marks_ns if marks else None,
                         meta={"model": "chain", "backend": "cuda"})
