"""`megakernel bench --batch N`: the product rows decode N requests together, the PyTorch baselines N sequences in
one static batch; a step's time and N give tok/s; the floor counts every sequence's KV."""
from __future__ import annotations

import pytest
import torch

from engine.bench.baselines import generate
from engine.bench.batch_runner import MAX_WARM_WINDOWS, TIMED_WINDOWS, median_window, rotations, warm_then_time
from engine.bench.floor import decode_floor
from engine.bench.harness import BenchConfig, run_bench
from engine.bench.static_llama import StaticLlama
from models.llama.presets import preset_config
from models.llama.weights import LlamaWeights


def test_rotations_are_distinct_prompts_of_one_length() -> None:
    got = rotations([1, 2, 3, 4], 3)
    assert got == [[1, 2, 3, 4], [2, 3, 4, 1], [3, 4, 1, 2]] and len({tuple(p) for p in got}) == 3


@pytest.mark.parametrize("compiles_per_window, warm_runs, in_timed", [
    ([3, 0], 2, 0),          # the second window compiles nothing: it is the last warm-up
    ([3, 2, 0], 3, 0),       # a hosted shape compiled in the second window: one more warm-up
    ([1] * 9, MAX_WARM_WINDOWS, 1),  # never settles: the timed window says what it compiled
])
def test_warm_up_windows_run_until_one_compiles_nothing(compiles_per_window: list[int], warm_runs: int,
                                                        in_timed: int) -> None:
    total, runs = [0], []

    def window() -> int:
        runs.append(len(runs))
        total[0] += compiles_per_window[min(len(runs) - 1, len(compiles_per_window) - 1)]
        return len(runs)

    results, compiled = warm_then_time(window, lambda: total[0])
    assert results == list(range(warm_runs + 1, warm_runs + 1 + TIMED_WINDOWS))
    assert compiled == (in_timed * TIMED_WINDOWS if in_timed else 0)


def test_the_row_is_the_median_window_with_the_first_windows_tokens() -> None:
    tokens, median, each = median_window([([1, 2], 0.0053), ([1, 2], 0.0027), ([1, 2], 0.0028)])
    assert tokens == [1, 2] and median == 0.0028 and each == (0.0053, 0.0027, 0.0028)


def test_the_floor_reads_the_weights_once_and_every_kv() -> None:
    cfg = preset_config("llama-3.2-1b")
    one, eight = decode_floor(cfg, 2, 32, 128, 4000.0), decode_floor(cfg, 2, 32, 128, 4000.0, batch=8)
    assert eight.weight_bytes == one.weight_bytes and eight.kv_bytes == pytest.approx(8 * one.kv_bytes)


def test_batch_bench_on_the_cpu() -> None:
    result = run_bench(BenchConfig(preset="tiny", device="cpu", batch=3, new_tokens=4, prompt_len=6, repeats=1))
    rows = {r.name: r for r in result.rows}
    eager, engine = rows["eager"], rows["engine-torch"]
    assert eager.status == "ok" and engine.status == "ok" and len(engine.tokens) == 4
    assert engine.tok_per_s == pytest.approx(3 / (engine.ms_per_token / 1e3))
    assert engine.tokens_match is not None  # sequence 0's tokens against the batched eager baseline's
    assert engine.max_logprob_error is not None and engine.max_logprob_error < 0.05


@torch.no_grad()
def test_a_batched_static_model_decodes_each_sequence_as_alone(tiny_weights: LlamaWeights) -> None:
    prompts = rotations(torch.randint(0, tiny_weights.config.vocab_size, (7,)).tolist(), 3)
    batched = StaticLlama(tiny_weights, 7 + 5, batch=3)
    generate(batched, batched.forward, torch.tensor(prompts), 5)
    for b, p in enumerate(prompts):
        alone = StaticLlama(tiny_weights, 7 + 5)
        assert batched.history[b, 6:11].tolist() == generate(alone, alone.forward, torch.tensor(p), 5)[0]


def test_rotations_of_other_lengths_repeat_the_prompt() -> None:
    assert rotations([1, 2, 3], 3, [5, 2, 3]) == [[1, 2, 3, 1, 2], [2, 3], [3, 1, 2]]


def test_mixed_lengths_floor_counts_each_sequence_kv() -> None:
    cfg = preset_config("llama-3.2-1b")
    mixed = decode_floor(cfg, 2, 32000, 64, 4000.0, batch=16, prompt_lens=(32000,) + (1000,) * 15)
    long, short = decode_floor(cfg, 2, 32000, 64, 4000.0), decode_floor(cfg, 2, 1000, 64, 4000.0)
    assert mixed.weight_bytes == long.weight_bytes
    assert mixed.kv_bytes == pytest.approx(long.kv_bytes + 15 * short.kv_bytes)


def test_mixed_lengths_bench_on_the_cpu() -> None:
    """`--prompt-lens`: the product rows decode sequences of several lengths together; the equal-length PyTorch
    baselines are skipped with the reason; sequence 0 (the first length) is the one whose tokens are checked."""
    config = BenchConfig(preset="tiny", device="cpu", batch=3, prompt_len=9, prompt_lens=(9, 4, 4), new_tokens=4,
                         repeats=1)
    result = run_bench(config)
    rows = {r.name: r for r in result.rows}
    assert rows["eager"].status == "skipped" and "equal-length" in rows["eager"].reason
    engine = rows["engine-torch"]
    assert engine.status == "ok" and len(engine.tokens) == 4
    assert engine.max_logprob_error is not None and engine.max_logprob_error < 0.05
    one = decode_floor(preset_config("tiny"), 2, 9, 4, 1.0, prompt_lens=(9,)).kv_bytes / (9 + 1.5)  # per token
    assert result.floor.kv_bytes == pytest.approx(one * ((9 + 1.5) + 2 * (4 + 1.5)))
    with pytest.raises(ValueError, match="prompt_lens"):
        BenchConfig(preset="tiny", device="cpu", batch=2, prompt_len=9, prompt_lens=(9, 4, 4)).validate()


def test_the_prompt_lens_flag() -> None:
    import argparse

    from engine.bench.config import parse_prompt_lens

    assert parse_prompt_lens("32000,1000x15") == (32000,) + (1000,) * 15
    assert parse_prompt_lens("8,8") == (8, 8)
    for bad in ("", "0", "12,ax3", "5x"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_prompt_lens(bad)
