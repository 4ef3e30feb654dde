"""Per-opcode diff of the megakernel against the VM on identical instruction tensors: every buffer an
opcode writes (hidden, mid, q, attn_out, act, logits, the paged K/V) after prefill chunks and decode
steps, for several model shapes and every schedule policy."""
from __future__ import annotations

import pytest
import torch

from tests.gpu.mk_helpers import BUFFERS, clear_winners, kv_err, pair, rel_err, small
from tests.vm.helpers import Scenario, random_weights

pytestmark = pytest.mark.gpu

SHAPES = {
    "hd64-gqa2": small(256, 4, 2, 64, 512, 2, 512),
    "hd128-gqa4-1layer": small(512, 8, 2, 128, 1024, 1, 1000),
    "hd64-mha": small(256, 4, 4, 64, 768, 1, 300),
    "hd32-gqa8": small(256, 8, 1, 32, 512, 1, 256),
}


@pytest.mark.parametrize("policy", ["rr", "lpt", "dynamic"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_buffers_match_vm(shape: str, policy: str) -> None:
    cfg = SHAPES[shape]
    weights = random_weights(cfg, seed=3)
    vm, gpu = pair(weights, policy)
    scen = Scenario(cfg, [13, 5], page_size=16, num_pages=64, seed=1)
    limit = gpu.max_tokens_per_step
    assert limit >= 8
    # prefill chunk, prefill tail + a second prompt's head, decode + prompt tail, then decodes
    plans = [[8, 0], [None, 3], [1, None]] + [[1, 1]] * 4
    for chunk in plans:
        batch, seqs = scen.batch(chunk)
        assert batch.num_tokens <= limit
        ref_logits = vm.forward(batch)
        vm_tokens = vm.last_tokens
        gpu_tokens = gpu.greedy(batch)
        vm_bufs, _ = vm.last_stream.backend_state
        ds = gpu.last
        for name in BUFFERS:
            err = rel_err(ds.acts[name], vm_bufs.get(name))
            assert err < 2e-2, f"{shape}/{policy}: buffer {name} differs (rel {err:.2e}) at step {chunk}"
        assert kv_err(gpu, vm) < 2e-2
        clear = clear_winners(ref_logits)
        assert torch.equal(gpu_tokens.cpu()[clear], vm_tokens[clear]), f"{shape}/{policy}: greedy ids differ"
        scen.feed(seqs, vm_tokens.tolist())


def test_three_sequences_use_padded_matvec_rows() -> None:
    """3 tokens per step run the 4-row matvec variant: rows past the batch must not leak anywhere."""
    cfg = SHAPES["hd64-gqa2"]
    vm, gpu = pair(random_weights(cfg, seed=7), "dynamic")
    scen = Scenario(cfg, [6, 4, 3], page_size=16, num_pages=64, seed=4)
    for chunk in [[6, 0, 0], [0, None, None], [1, 1, 1], [1, 1, 1], [1, 1, 1]]:
        batch, seqs = scen.batch(chunk)
        vm.forward(batch)
        gpu_tokens = gpu.greedy(batch)
        vm_bufs, _ = vm.last_stream.backend_state
        for name in BUFFERS:
            assert rel_err(gpu.last.acts[name], vm_bufs.get(name)) < 2e-2, name
        assert torch.equal(gpu_tokens.cpu(), vm.last_tokens)
        scen.feed(seqs, vm.last_tokens.tolist())


@pytest.mark.parametrize("policy", ["rr", "lpt", "dynamic"])
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("head_chunks", [None, 1, "per-head"])
def test_fused_attention_o_proj_matches_vm(shape: str, policy: str, head_chunks: int | str | None) -> None:
    """Batch-1 steps with one KV split run ATTN_O_PROJ (attention fused with its O-proj slice, atomic adds
    into mid and hidden) and the QKV ops' hidden -> mid copies: a prefill chunk, its tail, then decodes.
    The decodes take the kernel's KV-ring attention and, where the slice is 64/128/256 columns wide, the W_o
    panel pages (csrc/interpreter/panel_pages.cuh); "per-head" gives every instruction one head."""
    cfg = SHAPES[shape]
    chunks = cfg.num_attention_heads // cfg.num_key_value_heads if head_chunks == "per-head" else head_chunks
    vm, gpu = pair(random_weights(cfg, seed=5), policy, fuse_o_proj=True, fused_head_chunks=chunks)
    scen = Scenario(cfg, [13], page_size=16, num_pages=64, seed=2)
    for chunk in [[8], [None]] + [[1]] * 4:
        batch, seqs = scen.batch(chunk)
        vm.forward(batch)
        gpu_tokens = gpu.greedy(batch)
        opcodes = {type(i).__name__ for i in vm.last_stream.stream.instrs}
        assert "AttnOProj" in opcodes and "OProjResidual" not in opcodes, opcodes
        vm_bufs, _ = vm.last_stream.backend_state
        for name in BUFFERS:
            if name == "attn_out":  # the fused op never writes it
                continue
            err = rel_err(gpu.last.acts[name], vm_bufs.get(name))
            assert err < 2e-2, f"{shape}/{policy}: buffer {name} differs (rel {err:.2e}) at step {chunk}"
        assert kv_err(gpu, vm) < 2e-2
        assert torch.equal(gpu_tokens.cpu(), vm.last_tokens), f"{shape}/{policy}: greedy ids differ"
        scen.feed(seqs, vm.last_tokens.tolist())


@pytest.mark.parametrize("policy", ["lpt", "dynamic"])
def test_per_sequence_kv_splits_match_vm(policy: str) -> None:
    """SplitParams.per_seq_splits (the default): one long context among short ones, so the decode steps give the long
    sequence many KV splits (with their ATTN_REDUCE) and the short ones one each (written straight to attn_out), in
    the same step; every buffer against the VM on the same instruction tensors."""
    from tests.gpu.mk_helpers import steps_match_vm

    cfg = SHAPES["hd64-gqa2"]
    vm, gpu = pair(random_weights(cfg, seed=17), policy, num_pages=64)
    scen = Scenario(cfg, [200, 6, 9], page_size=16, num_pages=64, seed=6)
    steps_match_vm(vm, gpu, scen, [[200, 6, 9], [1, 1, 1], [1, 1, 1], [1, 1, 1]], f"per-seq splits {policy}",
                   check_kv=True)
    splits = gpu.last.compiled.stream.plan.seq_splits
    assert splits[0] > 1 and splits[1:] == (1, 1), splits
