"""LM_HEAD: final RMSNorm of each sequence's last token and a block of vocabulary logits, with the block's
(max, first argmax) per sequence for ARGMAX_REDUCE."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from engine.instructions.accesses import Access, box, runs
from engine.instructions.cost import CostInputs, InstrCost
from engine.instructions.format import Header
from engine.instructions.op_spec import Buffers, OpSpec
from engine.instructions.rmsnorm import rms


@dataclass(frozen=True)
class LmHead:
    """Final RMSNorm of each sequence's last token, logits[:, v] for v in [v_begin, v_end), and the
    block's (max, first argmax) per sequence into lm_max/lm_arg[:, block]."""

    OPERANDS: ClassVar[tuple[str, ...]] = ("v_begin", "v_end", "block")
    v_begin: int
    v_end: int
    block: int
    header: Header = field(default_factory=Header)


def execute(i: LmHead, b: Buffers) -> None:
    a = b.args
    last = torch.tensor(a.last_live_tokens(0, a.num_seqs))
    x = rms(b.get("hidden")[last], b.w("final_norm"), b.dims.eps)
    logits = x @ b.matrix("lm_head", slice(i.v_begin, i.v_end)).T  # [S, block]
    b.get("logits")[:, i.v_begin: i.v_end] = logits
    mx, arg = logits.max(dim=1)  # torch returns the first maximal index
    b.get("lm_max")[:, i.block] = mx
    b.get("lm_arg")[:, i.block] = (arg + i.v_begin).to(torch.int32)


def accesses(i: LmHead, b: Buffers) -> list[Access]:
    a, S = b.args, b.args.num_seqs
    last = runs(np.array(a.last_live_tokens(0, S)))
    return [Access("hidden", "r", (box(last, (0, b.dims.hidden)),)),
            Access("logits", "w", (box((0, S), (i.v_begin, i.v_end)),)),
            Access("lm_part", "w", (box((0, S), (i.block, i.block + 1)),))]


def cost(i: LmHead, c: CostInputs) -> InstrCost:
    S, H, r = c.shape.num_seqs, c.dims.hidden, i.v_end - i.v_begin
    return InstrCost(r * H * c.weight_bytes, S * H * 4 + S * r * 4, 2 * S * r * H)


SPEC = OpSpec("LM_HEAD", LmHead, execute, accesses, cost)
