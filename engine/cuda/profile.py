"""A timed step's records as a ProfileRecord (`megakernel profile --backend cuda`, engine/profiling.py).

Decode steps run with timing compiled in (the kernel's TIMING instantiation); each record holds
%globaltimer at start, when its dependencies were satisfied, and at the end (after its counter
signal), plus the SM id, then sub-phase marks (csrc/interpreter/marks.cuh, profiler/marks.py). Rows
follow the stream's topological order (instruction id).
"""
from __future__ import annotations

import numpy as np

from engine.cuda.device_stream import DeviceStream
from engine.cuda.variant import VARIANT_NAMES
from engine.instructions.registry import OPCODE_KINDS, OPCODE_NAMES, OPERAND_NAMES
from profiler.record import MetaValue, ProfileRecord


def record_from_timing(ds: DeviceStream | None, mark0: int, meta: dict[str, MetaValue]) -> ProfileRecord:
    """The records of the last step `ds` ran (`mark0`: the module's TIMING_MARK0, the first mark column); its meta
    gains the kernel variant that ran it (engine/cuda/variant.py)."""
    if ds is None or ds.timing is None:
        raise RuntimeError("no timed step has run")
    t = ds.timing.cpu().numpy().astype(np.int64)
    cs = ds.compiled
    ran = t[:, 2] != 0
    costs = np.array([c.weight_bytes + c.act_bytes for c in cs.costs], dtype=np.int64)
    return ProfileRecord(words=cs.stream.words()[ran], sm=t[ran, 3], start_ns=t[ran, 0], end_ns=t[ran, 2],
                         wait_ns=np.maximum(t[ran, 1] - t[ran, 0], 0), opcode_names=OPCODE_NAMES,
                         simulated=False, bytes_moved=costs[ran], meta={**meta, "kernel": VARIANT_NAMES[ds.variant]},
                         operand_names=OPERAND_NAMES, opcode_kinds=dict(OPCODE_KINDS), marks_ns=t[ran, mark0:])
