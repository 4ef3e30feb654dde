"""Tensor parallelism on the VM (engine/vm/rank_group.py): 2 and 4 ranks, each running its megakernel shard's
instruction streams with TP_ALLREDUCE after every O and down projection, give the whole model's logits (fp32,
<= 1e-4 relative) and greedy tokens, with the race detector on, on the matvec, tile and fused paths; every rank's
in-stream argmax agrees; greedy steps split the LM head's vocabulary over the ranks and take the argmax across them
(TP_ARGMAX); dropping an all-reduce's or that argmax's dependency trips the race detector."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from engine.backends.vm_tensor_parallel import TensorParallelVMBackend
from engine.instructions.op_spec import with_header
from engine.instructions.ops.tp_allreduce import TpAllreduce
from engine.instructions.layout import pow2_align
from engine.instructions.registry import OPCODES, Opcode
from engine.scheduler.compiler.tensor_parallel_cuts import tp_vocab_rows
from engine.vm.race import RaceError
from engine.vm.rank_group import RankGroupVM
from models.llama.kv_cache import PagedKVCache
from models.llama.model import LlamaModel
from models.llama.tensor_parallel import megakernel_shard, shard_weights
from tests.vm.helpers import Scenario, random_weights, small_config

CFG = small_config(hidden=64, heads=8, kv_heads=4, head_dim=32, inter=128, tied=True)
PAGE, PAGES = 8, 64


def _group(world: int, **vm_kw: object) -> TensorParallelVMBackend:
    w = random_weights(CFG, seed=21)
    shards = [megakernel_shard(shard_weights(w, r, world, vocab_parallel=False), world) for r in range(world)]
    return TensorParallelVMBackend(shards, PAGES, PAGE, tp_chunk_cols=16, **vm_kw)


def _run(group: TensorParallelVMBackend, prompt_lens: list[int], schedule: list[list[int | None]]) -> None:
    ref = LlamaModel(random_weights(CFG, seed=21))
    kv = PagedKVCache.allocate(CFG, PAGES, PAGE, dtype=torch.float32)
    sc = Scenario(CFG, prompt_lens, PAGE, PAGES, seed=4)
    for step, chunk in enumerate(schedule):
        batch, seqs = sc.batch(chunk)
        want = ref.forward(batch, kv)
        got = group.forward(batch)
        err = (want - got).abs().max().item()
        assert err < 1e-4 * max(1.0, want.abs().max().item()), f"step {step}: max |logit diff| {err}"
        ids = [rank.last_tokens.tolist() for rank in group.ranks]
        assert ids == [want.argmax(-1).tolist()] * len(group.ranks), f"step {step}: ranks' greedy tokens {ids}"
        ops = {OPCODES.code_of(i) for i in group.ranks[0].last_stream.stream.instrs}
        assert Opcode.TP_ALLREDUCE in ops
        sc.feed(seqs, want.argmax(-1).tolist())


@pytest.mark.parametrize("world", [2, 4])
def test_matvec_steps_match_the_whole_model(world: int) -> None:
    _run(_group(world, num_sms=12, policy="lpt"), [11, 5], [[None, None], [1, 1], [1, 1]])


def test_tile_steps_match_the_whole_model() -> None:
    group = _group(2, num_sms=12, tile_min_tokens=3)
    _run(group, [13, 9], [[None, None], [1, 1]])


def test_fused_batch1_steps_match_the_whole_model() -> None:
    group = _group(2, num_sms=16, max_attn_splits=1, fuse_o_proj=True)
    _run(group, [9], [[None], [1], [1]])
    assert group.ranks[0].last_stream.stream.plan.fused


def _drop_wait(instrs: list, pick) -> list:  # noqa: ANN001
    out = list(instrs)
    i = next(k for k, ins in enumerate(out) if pick(ins))
    out[i] = with_header(out[i], waits=())
    return out


@pytest.mark.parametrize("which", ["allreduce", "reader"])
def test_a_dropped_all_reduce_dependency_is_a_race(which: str) -> None:
    """TP_ALLREDUCE without its wait for the O projection, or the gate/up without its wait for the all-reduce."""
    group = _group(2, num_sms=12, policy="lpt")
    batch, _ = Scenario(CFG, [7], PAGE, PAGES, seed=2).batch([None])
    group.forward(batch)  # compiles the stream and proves it clean
    with torch.inference_mode():
        prepared = [rank.prepare(batch) for rank in group.ranks]
    cs = prepared[0][0]
    if which == "allreduce":
        pick = lambda ins: isinstance(ins, TpAllreduce) and ins.header.layer == 1  # noqa: E731
    else:
        pick = lambda ins: OPCODES.code_of(ins) == Opcode.RMS_GATE_UP_SILU and ins.header.layer == 1  # noqa: E731
    mutated = _drop_wait(cs.stream.instrs, pick)
    stream = dataclasses.replace(cs.stream, instrs=mutated, _encoded=None, _words=None)
    queues = cs.schedule.tensor(stream.words())  # the same placement, the mutated words
    vms = [rank.machine(bufs) for rank, (_, bufs, _) in zip(group.ranks, prepared)]
    with pytest.raises(RaceError):
        for seed in range(8):  # some interleaving runs the racing pair unordered
            RankGroupVM(vms, seed=seed).run_static([queues] * 2, [sync for _, _, sync in prepared])


@pytest.mark.parametrize("world", [2, 4])
def test_greedy_steps_split_the_vocabulary_and_agree_on_the_argmax(world: int) -> None:
    group = _group(world, num_sms=12, policy="lpt")
    ref = LlamaModel(random_weights(CFG, seed=21))
    kv = PagedKVCache.allocate(CFG, PAGES, PAGE, dtype=torch.float32)
    sc = Scenario(CFG, [10, 6, 3], PAGE, PAGES, seed=5)
    for chunk in ([None, None, None], [1, 1, 1], [1, 1, 1]):
        batch, seqs = sc.batch(chunk)
        want = ref.forward(batch, kv).argmax(-1).tolist()
        got = group.greedy(batch).tolist()
        assert got == want
        assert [rank.last_tokens.tolist() for rank in group.ranks] == [want] * world
        shares: list[tuple[int, int]] = []
        for r, rank in enumerate(group.ranks):
            stream = rank.last_stream.stream
            heads = [(i.v_begin, i.v_end) for i in stream.instrs if OPCODES.code_of(i) == Opcode.LM_HEAD]
            share = tp_vocab_rows(rank.dims, r, pow2_align(CFG.vocab_size))
            assert (min(a for a, _ in heads), max(b for _, b in heads)) == share
            shares.append(share)
            assert any(OPCODES.code_of(i) == Opcode.TP_ARGMAX for i in stream.instrs)
        assert shares[0][0] == 0 and shares[-1][1] == CFG.vocab_size
        assert all(a[1] == b[0] for a, b in zip(shares, shares[1:]))  # the ranks' shares tile the vocabulary
        sc.feed(seqs, want)


def test_a_tie_across_ranks_goes_to_the_smallest_id() -> None:
    """Equal best logits on two ranks: rank 0's id (the smaller), as ARGMAX_REDUCE's blocks order it."""
    from engine.instructions.ops.tp_argmax import TpArgmax, execute, publish
    from engine.instructions.tp_exchange import TpExchange

    exchanges = TpExchange.group(2, layers=1, hidden=4, slot_tokens=2)

    class Bufs:  # the few fields TP_ARGMAX reads
        def __init__(self, ex: TpExchange, mx: list[float], arg: list[int]) -> None:
            self.tp, self.dims = ex, dataclasses.make_dataclass("D", [("layers", int)])(1)
            self.args = dataclasses.make_dataclass("A", [("num_seqs", int)])(2)
            self._b = {"lm_max": torch.tensor([mx]).T.contiguous(), "lm_arg": torch.tensor([arg]).T.contiguous(),
                       "out_tokens": torch.full((2,), -1, dtype=torch.int32)}

        def get(self, name: str) -> torch.Tensor:
            return self._b[name]

    ranks = [Bufs(exchanges[0], [1.5, 0.25], [3, 4]), Bufs(exchanges[1], [1.5, 0.5], [70, 71])]
    op = TpArgmax(num_blocks=1)
    for b in ranks:
        publish(op, b)  # type: ignore[arg-type]
    for b in ranks:
        execute(op, b)  # type: ignore[arg-type]
        assert b.get("out_tokens").tolist() == [3, 71]


def test_a_dropped_argmax_dependency_is_a_race() -> None:
    """TP_ARGMAX without its wait for the LM head's blocks."""
    group = _group(2, num_sms=12, policy="lpt")
    batch, _ = Scenario(CFG, [7], PAGE, PAGES, seed=2).batch([None])
    group.greedy(batch)  # compiles the stream and proves it clean
    with torch.inference_mode():
        prepared = [rank.prepare(batch, argmax_only=True) for rank in group.ranks]
    cs = prepared[0][0]
    mutated = _drop_wait(cs.stream.instrs, lambda ins: OPCODES.code_of(ins) == Opcode.TP_ARGMAX)
    stream = dataclasses.replace(cs.stream, instrs=mutated, _encoded=None, _words=None)
    queues = cs.schedule.tensor(stream.words())
    vms = [rank.machine(bufs) for rank, (_, bufs, _) in zip(group.ranks, prepared)]
    with pytest.raises(RaceError):
        for seed in range(8):
            RankGroupVM(vms, seed=seed).run_static([queues] * 2, [sync for _, _, sync in prepared])


def test_fp8_weights_match_one_rank() -> None:
    """fp8 matrices with per-channel scales: each rank keeps its rows' scales (the embedding dequantised, scaled)."""
    from engine.backends.vm_backend import VMBackend
    from models.llama.fp8 import Fp8Scheme
    from models.llama.weights import quantize_weights

    w = quantize_weights(random_weights(CFG, seed=3), Fp8Scheme("channel"))
    one = VMBackend(w, PAGES, PAGE, num_sms=12, policy="lpt")
    shards = [megakernel_shard(shard_weights(w, r, 2, vocab_parallel=False), 2) for r in range(2)]
    group = TensorParallelVMBackend(shards, PAGES, PAGE, num_sms=12, policy="lpt", tp_chunk_cols=16)
    batch, _ = Scenario(CFG, [9, 4], PAGE, PAGES, seed=1).batch([None, None])
    want, got = one.forward(batch), group.forward(batch)
    assert (want - got).abs().max().item() < 1e-4 * max(1.0, want.abs().max().item())
    assert group.ranks[0].last_tokens.tolist() == one.last_tokens.tolist()
