"""Device timing tensor -> ProfileRecord (the "decode" step for the CUDA kernel's timing records).

Proposed device layout, one int64 row per instruction slot, same leading dims as the instruction
tensor ([num_sms, max_queue_len] for static schedules, [N] for the dynamic work queue):
    column 0 START      %globaltimer when the instruction started executing
    column 1 END        %globaltimer when its outputs were visible (counter bumped)
    column 2 WAIT_START %globaltimer when it began waiting on its dependency counters
    column 3 WAIT_END   %globaltimer when the last dependency was satisfied
    column 4 SMID       %smid of the SM that ran it (block id != SM id in general)
Slots never executed (padding, or beyond the step's queue) have END == 0 and are dropped.
"""
from __future__ import annotations

import numpy as np

from profiler.record import MetaValue, ProfileFormatError, ProfileRecord

START, END, WAIT_START, WAIT_END, SMID = range(5)
TIMING_COLUMNS = 5


def decode_timings(
    words: np.ndarray,
    timings: np.ndarray,
    opcode_names: dict[int, str],
    *,
    simulated: bool = False,
    bytes_moved: np.ndarray | None = None,
    meta: dict[str, MetaValue] | None = None,
    operand_names: dict[int, list[str]] | None = None,
) -> ProfileRecord:
    """Flatten matching instruction/timing tensors and keep the slots that actually ran."""
    words, timings = np.asarray(words), np.asarray(timings)
    if timings.shape[-1] != TIMING_COLUMNS or timings.shape[:-1] != words.shape[:-1]:
        raise ProfileFormatError(
            f"timings: expected shape {(*words.shape[:-1], TIMING_COLUMNS)} to match instructions "
            f"{words.shape}, got {timings.shape}"
        )
    w = words.reshape(-1, words.shape[-1])
    t = timings.reshape(-1, TIMING_COLUMNS).astype(np.int64)
    ran = t[:, END] != 0
    if bytes_moved is not None:
        bytes_moved = np.asarray(bytes_moved).reshape(-1)[ran]
    t = t[ran]
    # A slot that never waited leaves both wait stamps equal (or zero): clamp to 0, never negative.
    wait = np.maximum(t[:, WAIT_END] - t[:, WAIT_START], 0)
    return ProfileRecord(
        words=w[ran], sm=t[:, SMID], start_ns=t[:, START], end_ns=t[:, END], wait_ns=wait,
        opcode_names=opcode_names, simulated=simulated, bytes_moved=bytes_moved,
        meta=dict(meta or {}), operand_names=dict(operand_names or {}),
    )
