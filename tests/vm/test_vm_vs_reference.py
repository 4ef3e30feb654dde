"""VM == reference model in float32: logits within 1e-5 and identical greedy tokens."""
from __future__ import annotations

import pytest

from tests.vm.helpers import random_weights, run_pair, small_config

# (heads, kv_heads, head_dim, hidden, inter, tied)
CONFIGS = [
    (4, 4, 32, 64, 128, True),     # MHA (GQA 1)
    (4, 2, 64, 96, 160, False),    # GQA 2, head_dim 64, untied
    (8, 2, 32, 64, 96, True),      # GQA 4
    (8, 1, 128, 64, 64, False),    # GQA 8 (MQA), head_dim 128
]


@pytest.mark.parametrize("heads,kv,hd,hidden,inter,tied", CONFIGS)
def test_prefill_then_decode(heads: int, kv: int, hd: int, hidden: int, inter: int, tied: bool) -> None:
    cfg = small_config(hidden=hidden, heads=heads, kv_heads=kv, head_dim=hd, inter=inter, tied=tied)
    w = random_weights(cfg, seed=heads + kv)
    # 2 sequences whose prompts cross page boundaries (page_size 8), then 3 decode steps.
    run_pair(cfg, w, [[None, None]] + [[1, 1]] * 3, prompt_lens=[11, 17], check_races=False)


@pytest.mark.parametrize("batch", [1, 2, 3, 4])
def test_batch_sizes_with_races_checked(batch: int) -> None:
    cfg = small_config()
    w = random_weights(cfg, seed=batch)
    run_pair(cfg, w, [[None] * batch] + [[1] * batch] * 2, prompt_lens=[3 + 6 * s for s in range(batch)],
             num_sms=6)


def test_chunked_prefill_mixed_with_decode() -> None:
    """Chunks starting at pos > 0 in the same step as another sequence's decode tokens."""
    cfg = small_config(heads=4, kv_heads=2, head_dim=32)
    w = random_weights(cfg, seed=7)
    steps = [[5, None], [7, 1], [None, 1], [1, 1], [1, 1]]
    run_pair(cfg, w, steps, prompt_lens=[21, 4], num_sms=12)


@pytest.mark.parametrize("policy", ["rr", "lpt", "dynamic"])
def test_every_policy(policy: str) -> None:
    cfg = small_config()
    w = random_weights(cfg, seed=3)
    run_pair(cfg, w, [[None, None], [1, 1], [1, 1]], prompt_lens=[9, 14], policy=policy, num_sms=16)


def test_odd_dims_and_many_splits() -> None:
    """Dims that are not multiples of 16 (row blocks fall back to smaller alignments), many KV splits."""
    cfg = small_config(hidden=40, heads=2, kv_heads=1, head_dim=20, inter=52, vocab=99)
    w = random_weights(cfg, seed=11)
    run_pair(cfg, w, [[None]] + [[1]] * 3, prompt_lens=[45], num_sms=24, page_size=4)


@pytest.mark.parametrize("chunks", [1, 2, None])
def test_attention_head_chunks_with_kv_splits(chunks: int | None) -> None:
    """Head ranges x KV splits x reduce: GQA 4, two sequences, many SMs, races checked."""
    cfg = small_config(heads=8, kv_heads=2, head_dim=32)
    w = random_weights(cfg, seed=5)
    run_pair(cfg, w, [[None, None], [1, 1], [1, 1]], prompt_lens=[30, 19], num_sms=64,
             max_attn_head_chunks=chunks, min_pages_per_split=1)


@pytest.mark.parametrize("policy", ["lpt", "dynamic"])
def test_per_sequence_kv_splits_for_one_long_context_among_short_ones(policy: str) -> None:
    """SplitParams.per_seq_splits: the long sequence's attention in many splits (with its reduce), the short ones in
    one (written straight to attn_out), in the same steps; races checked, logits against the reference."""
    cfg = small_config(heads=4, kv_heads=2, head_dim=32)
    w = random_weights(cfg, seed=13)
    seen: list[tuple[int, ...]] = []

    def splits(vm) -> None:  # noqa: ANN001
        seen.append(vm.last_stream.stream.plan.seq_splits)

    run_pair(cfg, w, [[None, None, None], [1, 1, 1], [1, 1, 1]], prompt_lens=[120, 6, 9], num_sms=32, policy=policy,
             per_seq_splits=True, min_pages_per_split=1, after_step=splits)
    decode = seen[-1]
    assert decode[0] > 1 and decode[1:] == (1, 1), seen
