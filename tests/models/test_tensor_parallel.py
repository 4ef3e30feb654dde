"""Tensor parallelism of the reference model (models/llama/tensor_parallel.py) on CPUs: 2 and 4 processes with gloo
give the same logits (<= 1e-4, fp32) as one process, over a prompt chunk and decode steps of two sequences, for bf16-
shaped and fp8 weights; a model whose sizes the ranks cannot split is refused naming the field."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from models.llama.fp8 import Fp8Scheme
from models.llama.kv_cache import PagedKVCache
from models.llama.model import LlamaModel
from models.llama.step_batch import StepBatch
from models.llama.tensor_parallel import (TensorParallelGroup, TensorParallelLlama, check_tensor_parallel,
                                          shard_config, shard_weights)
from models.llama.weights import quantize_weights
from tests.gpu.mk_helpers import small
from tests.vm.helpers import random_weights

CFG = small(256, 8, 4, 32, 512, 2, 256)
PAGE = 16
PROMPTS = [[5, 17, 200, 42, 9, 77, 100, 3, 64, 128, 7], [11, 13, 2]]


def _weights(fp8: bool):
    w = random_weights(CFG, seed=11)
    return quantize_weights(w, Fp8Scheme("channel")) if fp8 else w


def _steps() -> list[StepBatch]:
    """A prefill of both prompts, then two decode steps (fixed next tokens)."""
    tables = [[0, 1], [2, 3]]
    out = [StepBatch.build(PROMPTS, [0, 0], tables, page_size=PAGE)]
    for i, toks in enumerate(([3, 4], [6, 8])):
        out.append(StepBatch.build([[t] for t in toks], [len(p) + i for p in PROMPTS], tables, page_size=PAGE))
    return out


def _run(model, config) -> list[torch.Tensor]:
    kv = PagedKVCache.allocate(config, num_pages=4, page_size=PAGE, dtype=torch.float32)
    return [model(b, kv) for b in _steps()]


def _rank(rank: int, world: int, init: str, fp8: bool, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        shard = shard_weights(_weights(fp8), rank, world)
        logits = _run(TensorParallelLlama(shard, TensorParallelGroup.current()), shard.config)
        if rank == 0:
            torch.save(logits, out)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world,fp8", [(2, False), (4, False), (2, True)])
def test_ranks_give_the_whole_models_logits(world: int, fp8: bool, tmp_path) -> None:
    want = _run(LlamaModel(_weights(fp8)), CFG)
    out = tmp_path / "logits.pt"
    mp.spawn(_rank, args=(world, f"file://{tmp_path / 'rendezvous'}", fp8, str(out)), nprocs=world, join=True)
    got = torch.load(out)
    for step, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape
        err = float((torch.log_softmax(g, -1) - torch.log_softmax(w, -1)).abs().max())
        assert err <= 1e-4, f"world {world}: step {step} logprobs differ by {err:.2e}"
        assert torch.equal(g.argmax(-1), w.argmax(-1))


def test_one_rank_is_the_whole_model() -> None:
    w = _weights(False)
    shard = shard_weights(w, 0, 1)
    assert shard.config == CFG
    got = _run(TensorParallelLlama(shard, TensorParallelGroup(0, 1)), CFG)
    for g, want in zip(got, _run(LlamaModel(w), CFG)):
        assert torch.allclose(g, want, atol=1e-5)


def test_sizes_the_ranks_cannot_split_are_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"tensor_parallel_size 3 does not divide num_attention_heads=8"):
        check_tensor_parallel(CFG, 3)
    with pytest.raises(ValueError, match=r"tensor_parallel_size 8 does not divide num_key_value_heads=4"):
        check_tensor_parallel(CFG, 8)
    odd_vocab = small(256, 8, 4, 32, 512, 2, 250)
    with pytest.raises(ValueError, match=r"does not divide vocab_size=250 \(the embedding and LM head rows"):
        check_tensor_parallel(odd_vocab, 4)
    assert shard_config(CFG, 4).num_key_value_heads == 1 and shard_config(CFG, 4).intermediate_size == 128


@pytest.mark.parametrize("tied,fp8", [(True, False), (False, False), (False, True)])
def test_a_rank_reads_only_its_shard_from_the_checkpoint(tied: bool, fp8: bool, tmp_path) -> None:
    """load_shard (each rank's parts read as slices of the safetensors file; fp8 quantised whole first) equals the
    in-memory shard of the whole model."""
    from dataclasses import replace

    from engine.bench.generate_runner import write_checkpoint
    from models.llama.tensor_parallel import load_shard
    from models.llama.weights import load_weights, to_state_dict

    cfg = replace(CFG, tie_word_embeddings=tied, vocab_size=512)  # a checkpoint needs a tokenizer: 256 bytes + specials
    weights = random_weights(cfg, seed=13)
    ckpt = write_checkpoint(weights, tmp_path)
    quant = {"quantize": Fp8Scheme("channel")} if fp8 else {}
    whole = load_weights(ckpt, cfg, dtype=torch.float32, progress=False, **quant)
    for rank in range(2):
        got = load_shard(ckpt, cfg, rank, 2, dtype=torch.float32, progress=False, **quant)
        want = shard_weights(whole, rank, 2)
        assert got.config == want.config
        a, b = to_state_dict(got, dequantize=False), to_state_dict(want, dequantize=False)
        assert a.keys() == b.keys()
        for name in a:
            x, y = a[name], b[name]
            if fp8:
                x, y = getattr(x, "data", x), getattr(y, "data", y)
            assert torch.equal(x, y), name
