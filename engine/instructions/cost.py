"""What an instruction moves and computes (bytes and FLOPs), the input of the compiler's cost model.

Each opcode module computes its own `InstrCost` from `CostInputs`; engine/scheduler/compiler/cost_model.py
turns it into a predicted time on a target device.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.instructions.layout import ModelDims, StepShape


@dataclass(frozen=True)
class InstrCost:
    weight_bytes: int  # HBM: weights + KV cache
    act_bytes: int  # fp32 activations (mostly L2-resident)
    flops: int


@dataclass(frozen=True)
class CostInputs:
    """What an opcode's cost depends on besides its operands: the model, the step shape, the build-time
    context length of each sequence, and the element sizes of weights and KV cache (bf16 on the GPU)."""

    dims: ModelDims
    shape: StepShape
    context_lens: tuple[int, ...]
    weight_bytes: int = 2
    kv_bytes: int = 2

    @property
    def tokens_per_seq(self) -> int:
        """New tokens of an average sequence (at least 1)."""
        return max(1, self.shape.num_tokens // self.shape.num_seqs)
