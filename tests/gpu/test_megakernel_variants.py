"""The batch-1 kernel variants (engine/cuda/variant.py, csrc/interpreter/config.cuh KernelVariant): one sequence's
decode steps run the variant of their attention path and match the VM as the general kernel does; a stream handed
the wrong variant stops with an error that names the instruction, and the stream then runs again. The config's
rows (hidden 512, 8 x 64 query columns, a 1024-wide MLP) all take the tensor cores, as the variants require."""
from __future__ import annotations

import pytest
import torch

from engine.backends.cuda_backend import CudaBackend
from engine.backends.vm_backend import VMBackend
from engine.cuda.errors import MegakernelError
from engine.cuda.variant import VARIANT_BATCH1_FUSED, VARIANT_BATCH1_SPLIT, VARIANT_GENERAL
from tests.gpu.mk_helpers import BUFFERS, clear_winners, pair, rel_err, small, vm_tolerance
from models.llama.step_batch import StepBatch
from tests.vm.helpers import Scenario, random_weights

pytestmark = pytest.mark.gpu

CFG = small(512, 8, 2, 64, 1024, 2, 512)


@pytest.mark.parametrize("fused,batch1,want", [(True, True, VARIANT_BATCH1_FUSED), (False, True, VARIANT_BATCH1_SPLIT),
                                               (True, False, VARIANT_GENERAL), (False, False, VARIANT_GENERAL)])
def test_batch1_decode_variants_match_vm(fused: bool, batch1: bool, want: int) -> None:
    vm, gpu = pair(random_weights(CFG, seed=4), "lpt", fuse_o_proj=fused, fused_head_chunks=2 if fused else None,
                   max_attn_splits=1 if fused else None, gpu_kw={"batch1_kernel": batch1})
    scen = Scenario(CFG, [21], page_size=16, num_pages=64, seed=8)
    for step, chunk in enumerate([[8], [8], [None]] + [[1]] * 5):
        batch, seqs = scen.batch(chunk)
        ref_logits = vm.forward(batch)
        gpu_tokens = gpu.greedy(batch)
        assert gpu.last is not None
        assert gpu.last.variant == (want if chunk == [1] else VARIANT_GENERAL), (step, gpu.last.variant)
        vm_bufs, _ = vm.last_stream.backend_state
        for name in BUFFERS:
            if fused and name == "attn_out":  # the fused op never writes it
                continue
            err = rel_err(gpu.last.acts[name], vm_bufs.get(name))
            assert err < vm_tolerance(name), f"fused={fused} batch1={batch1}: {name} differs (rel {err:.2e}) at step {step}"
        clear = clear_winners(ref_logits)  # near-ties may flip with the tensor cores' bf16 x
        assert torch.equal(gpu_tokens.cpu()[clear], vm.last_tokens[clear]), f"fused={fused} batch1={batch1}: ids differ at {step}"
        scen.feed(seqs, vm.last_tokens.tolist())


def _after_one_decode_step(gpu_kw: dict[str, object] | None = None) -> tuple[VMBackend, CudaBackend, Scenario]:
    """Both backends after a prefill and one decode step of one sequence on the split path."""
    vm, gpu = pair(random_weights(CFG, seed=4), "lpt", fuse_o_proj=False, gpu_kw=gpu_kw)
    scen = Scenario(CFG, [8], page_size=16, num_pages=64, seed=8)
    for chunk in ([None], [1]):
        batch, seqs = scen.batch(chunk)
        vm.forward(batch)
        gpu.greedy(batch)
        scen.feed(seqs, vm.last_tokens.tolist())
    return vm, gpu, scen


def _forced_variant_fails_then_recovers(vm: VMBackend, gpu: CudaBackend, batch: StepBatch, forced: int,
                                        match: str) -> None:
    """`batch` (already run on the VM) with its stream forced onto variant `forced` stops with an error matching
    `match`; on its own variant again it runs and gives the VM's ids."""
    ds = gpu.last
    assert ds is not None
    own = ds.variant
    ds.variant, ds._base_fields = forced, None
    with pytest.raises(MegakernelError, match=match):
        gpu.greedy(batch)
    ds.variant, ds._base_fields = own, None
    assert torch.equal(gpu.greedy(batch).cpu(), vm.last_tokens)  # the stream runs again after the failure


def test_wrong_variant_is_an_error_naming_the_instruction() -> None:
    vm, gpu, scen = _after_one_decode_step()
    assert gpu.last is not None and gpu.last.variant == VARIANT_BATCH1_SPLIT
    batch, _ = scen.batch([1])
    vm.forward(batch)
    # the fused variant has no ATTN_PARTIAL path
    _forced_variant_fails_then_recovers(vm, gpu, batch, VARIANT_BATCH1_FUSED,
                                        r"outside its kernel variant.*ATTN_PARTIAL")


def test_rows_off_the_tensor_cores_in_a_batch1_variant_are_an_error() -> None:
    """The batch-1 variants hold only the tensor-core page loop: with the matvecs on the CUDA cores the host picks
    the general kernel, and the variant forced on it stops at the first matvec, naming it."""
    vm, gpu, scen = _after_one_decode_step({"mma_matvec": False})
    assert gpu.last is not None and gpu.last.variant == VARIANT_GENERAL
    batch, _ = scen.batch([1])
    vm.forward(batch)
    _forced_variant_fails_then_recovers(vm, gpu, batch, VARIANT_BATCH1_SPLIT,
                                        r"outside its kernel variant.*RMS_QKV_ROPE_APPEND")


def test_a_batch1_variant_on_a_prefill_step_is_an_error() -> None:
    """The batch-1 variants take every step as one token of one sequence; handed a prefill chunk they stop at its
    first instruction instead of computing only its first token."""
    vm, gpu = pair(random_weights(CFG, seed=4), "lpt", fuse_o_proj=False)
    scen = Scenario(CFG, [8], page_size=16, num_pages=64, seed=8)
    batch, _ = scen.batch([None])
    vm.forward(batch)
    gpu.greedy(batch)
    assert gpu.last is not None and gpu.last.variant == VARIANT_GENERAL
    _forced_variant_fails_then_recovers(vm, gpu, batch, VARIANT_BATCH1_SPLIT, r"outside its kernel variant")
