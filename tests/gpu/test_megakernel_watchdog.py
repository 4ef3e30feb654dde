"""The watchdog: an impossible wait becomes a MegakernelError naming the instruction, not a hang, and
the GPU stays usable afterwards."""
from __future__ import annotations

import pytest
import torch

from engine.backends.cuda_backend import CudaBackend
from engine.cuda.errors import MegakernelError
from engine.instructions import registry as op
from tests.gpu.mk_helpers import small
from tests.vm.helpers import Scenario, random_weights

pytestmark = pytest.mark.gpu


def test_planted_impossible_wait_names_the_instruction() -> None:
    cfg = small(256, 4, 2, 64, 512, 2, 512)
    gpu = CudaBackend(random_weights(cfg, seed=5), num_pages=32, page_size=16, policy="rr",
                      timeout_ns=200_000_000, fuse_o_proj=False)  # the planted wait is an O_PROJ_RESIDUAL's
    scen = Scenario(cfg, [3], page_size=16, num_pages=32, seed=2)
    batch, _ = scen.batch([None])
    good = gpu.greedy(batch)
    ds = gpu.last
    prog = ds.program.view(-1, 32)
    ids = prog[:, 1].cpu()
    codes = prog[:, 0].cpu()
    target = int(torch.nonzero(codes == int(op.Opcode.O_PROJ_RESIDUAL))[0, 0])
    instr_id = int(ids[target])
    saved = prog[target].clone()
    with torch.inference_mode():
        prog[target, 18] = 1 << 29  # first wait's target: never reached
    with pytest.raises(MegakernelError, match=rf"root cause: instruction #{instr_id} O_PROJ_RESIDUAL waits for counter"):
        gpu.greedy(batch)
    with torch.inference_mode():
        prog[target] = saved
    again = gpu.greedy(batch)  # counters were reset: the stream runs normally again
    assert torch.equal(again, good)
