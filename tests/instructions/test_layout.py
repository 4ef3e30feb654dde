"""Weight packing permutations and the step-args buffer."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.instructions.layout import ModelDims, StepShape, pow2_align, rope_perm, step_args_offsets
from engine.instructions.packing import gate_up_source_rows, pack_weights, qkv_source_rows
from engine.instructions.step_args import StepArgsError, StepArgsView, encode_step_args
from models.llama.step_batch import StepBatch
from tests.vm.helpers import random_weights, small_config


@pytest.mark.parametrize("heads,kv,hd,inter", [(4, 4, 32, 128), (8, 2, 64, 96), (8, 1, 128, 40)])
def test_packing_is_a_permutation_with_grouped_rope_pairs(heads: int, kv: int, hd: int, inter: int) -> None:
    cfg = small_config(heads=heads, kv_heads=kv, head_dim=hd, inter=inter, tied=False)
    d = ModelDims.from_config(cfg)
    src = qkv_source_rows(d)
    assert sorted(src.tolist()) == list(range(d.qkv_rows))
    g_rows = d.group_rows
    for r in range(0, d.qkv_rows, 2):  # each adjacent pair in a q/k head is (i, i + hd/2) of one head
        a, b = src[r], src[r + 1]
        if a < d.q_cols + d.n_kv * hd:
            assert b - a == hd // 2 and a // hd == b // hd
        q_or_kv_head = a // hd if a < d.q_cols else (a - d.q_cols) // hd % d.n_kv
        group = q_or_kv_head // d.gqa if a < d.q_cols else q_or_kv_head
        assert r // g_rows == group
    gsrc = gate_up_source_rows(d)
    assert sorted(gsrc.tolist()) == list(range(2 * inter))
    t = d.gu_tile
    assert inter % t == 0 and np.all(gsrc[t: 2 * t] == inter + np.arange(t))

    w = random_weights(cfg, seed=1)
    p = pack_weights(w, torch.float32)
    layer = w.layers[1]
    cat = torch.cat([layer.q_proj, layer.k_proj, layer.v_proj])
    assert torch.equal(p["w_qkv"][1], cat[torch.from_numpy(src)])
    assert torch.equal(p["w_gate_up"][1], torch.cat([layer.gate_proj, layer.up_proj])[torch.from_numpy(gsrc)])
    assert torch.equal(p["w_o"][1], layer.o_proj) and torch.equal(p["w_down"][0], w.layers[0].down_proj)
    assert p["lm_head"] is not p["embed"] and torch.equal(p["lm_head"], w.lm_head)


def test_rope_perm_and_alignment() -> None:
    assert rope_perm(8).tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    assert [pow2_align(n) for n in (2048, 40, 52, 99, 24)] == [16, 8, 4, 1, 8]


def test_step_args_round_trip_and_patch() -> None:
    t1 = [7, 2, 8, 9, 10, 11]
    batch = StepBatch.build([[5, 6, 7], [9]], [4, 20], [[3, 1], t1], page_size=4)
    shape = StepShape(4, 2, 8)
    buf = encode_step_args(batch, shape, page_size=4)
    assert buf.numel() == step_args_offsets(shape)["total"]
    v = StepArgsView.decode(buf)
    assert (v.num_tokens, v.num_seqs, v.page_size) == (4, 2, 4)
    assert v.token_ids.tolist() == [5, 6, 7, 9] and v.positions.tolist() == [4, 5, 6, 20]
    assert v.slot_mapping.tolist() == [4, 5, 6, 11 * 4]
    assert v.query_start == [0, 3, 4] and v.context_lens == [7, 21]
    assert v.block_tables[0].tolist() == [3, 1] + [-1] * 6
    wrong = StepBatch.build([[1], [2], [3], [4]], [0, 0, 0, 0], [[0], [1], [2], [3]], page_size=4)
    with pytest.raises(StepArgsError, match="T=4, S=4"):
        encode_step_args(wrong, shape, 4, out=buf)
    dec = StepBatch.build([[1, 2], [3, 4]], [7, 21], [[3, 1, 6], t1], page_size=4)
    encode_step_args(dec, shape, 4, out=buf)  # patch in place
    v2 = StepArgsView.decode(buf)
    assert v2.positions.tolist() == [7, 8, 21, 22] and v2.context_lens == [9, 23]
    assert v2.slot_mapping.tolist() == [1 * 4 + 3, 6 * 4, 11 * 4 + 1, 11 * 4 + 2]
    assert v2.block_tables[0].tolist() == [3, 1, 6] + [-1] * 5
