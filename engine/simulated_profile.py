"""A compiled stream's cost-model timeline as a simulated ProfileRecord: what `megakernel profile --backend vm`
shows (engine/profiling.py) and the VM backend's `last_profile`."""
from __future__ import annotations

import numpy as np

from engine.instructions.registry import OPCODE_KINDS, OPCODE_NAMES, OPERAND_NAMES
from engine.scheduler.compiler.step_builder_cache import CompiledStream
from profiler.record import MetaValue, ProfileRecord


def record_from_compiled(cs: CompiledStream, meta: dict[str, MetaValue], offset_ns: int = 0) -> ProfileRecord:
    """One step's predicted timeline; rows follow the stream's topological order. Like the GPU's
    records, a span starts when the SM took the instruction, so it includes its dependency wait."""
    tl = cs.schedule.timeline
    return ProfileRecord(
        words=cs.stream.words(), sm=tl.sm,
        start_ns=np.round(tl.start_ns - tl.wait_ns).astype(np.int64) + offset_ns,
        end_ns=np.round(tl.end_ns).astype(np.int64) + offset_ns, wait_ns=np.round(tl.wait_ns).astype(np.int64),
        opcode_names=OPCODE_NAMES, simulated=True,
        bytes_moved=np.array([c.weight_bytes + c.act_bytes for c in cs.costs], dtype=np.int64),
        meta={"source": "cost-model", "predicted_makespan_ns": int(round(tl.makespan_ns)), **meta},
        operand_names=OPERAND_NAMES, opcode_kinds=dict(OPCODE_KINDS),
    )
