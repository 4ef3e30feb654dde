"""The fused sampling kernel (csrc/interpreter/sampling/sample_rows.cuh) against engine/sampling's torch ops on the same
logits, noise keys and counters: the same noise bits and the same filters, so the same tokens but where float
rounding moves a top-p boundary or a near-tie of the Gumbel draw (a handful of draws in thousands). Without top-p the
kept set is computed with the same float operations on both sides, so the kernel's token must be one the torch ops
keep, every time.

The kernel's paths, each covered below: greedy; temperature / min-p; top-k up to FAST_TOP_K through per-block
candidates finished by block 0 (with top-p, min-p, penalties, ties at the k-th value, blocks with fewer than k
tokens); larger top-k, top-p alone and rows whose candidates overflow a block's room (ties) through whole-row radix
passes; float4 and one-float first passes (aligned or not rows); many rows per launch."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from engine.cuda_build import load_extension
from engine.sampling.filters import filtered
from engine.sampling.penalties import TokenHistory
from engine.sampling.run_sampler import NoiseTables, RunSampler
from engine.sampling_params import TOP_P_FLOOR, SamplingParams

pytestmark = pytest.mark.gpu

# The largest top-k through candidates (the kernel's constant, parsed so the rows below straddle it).
_CONFIG = Path(__file__).resolve().parents[2] / "csrc" / "interpreter" / "sampling" / "sampling_config.cuh"
FAST_TOP_K = int(re.search(r"FAST_TOP_K = (\d+);", _CONFIG.read_text()).group(1))  # type: ignore[union-attr]

ROWS = [SamplingParams(temperature=0.0),
        SamplingParams(temperature=1.0),
        SamplingParams(temperature=0.7, top_p=0.9),
        SamplingParams(temperature=1.3, top_k=50),
        SamplingParams(temperature=0.8, top_p=0.95, top_k=40, repetition_penalty=1.2),
        SamplingParams(temperature=1.1, min_p=0.05, frequency_penalty=0.5, presence_penalty=0.4),
        SamplingParams(temperature=0.5, top_p=1e-9),
        SamplingParams(temperature=2.0, top_k=1000, top_p=0.5, min_p=0.01)]

# One launch holding a row of every path and setting.
MIXED = [SamplingParams(temperature=0.0, repetition_penalty=1.3),
         SamplingParams(temperature=0.9),
         SamplingParams(temperature=1.0, top_k=1),
         SamplingParams(temperature=0.7, top_k=5),
         SamplingParams(temperature=1.0, top_k=50),
         SamplingParams(temperature=0.8, top_k=50, top_p=0.95, repetition_penalty=1.1),  # the bench's row
         SamplingParams(temperature=1.2, top_k=200, top_p=0.9),
         SamplingParams(temperature=1.0, top_k=FAST_TOP_K),
         SamplingParams(temperature=1.0, top_k=FAST_TOP_K + 1),
         SamplingParams(temperature=0.9, top_k=1000, top_p=0.8),
         SamplingParams(temperature=1.0, top_k=40, min_p=0.05),
         SamplingParams(temperature=1.5, top_k=100, min_p=0.2, frequency_penalty=0.5, presence_penalty=0.4),
         SamplingParams(temperature=0.7, top_p=0.9),
         SamplingParams(temperature=1.0, top_k=3, top_p=1e-9)]  # top-p below its floor: top-k 1

# normal: every token a candidate of the draw; peaked: model-like; ties: many equal values at every k-th largest;
# coarse: a few integer levels, so a block's tokens at its bound overflow its candidate room; bf16: bfloat16-rounded
# logits (ties as a bf16 head gives them); flat: every logit equal.
KINDS = ("normal", "peaked", "ties", "coarse", "bf16", "flat")


def _logits(kind: str, rows: int, vocab: int, step: int, gen: torch.Generator) -> torch.Tensor:
    x = torch.randn((rows, vocab), generator=gen, device=gen.device)
    if kind == "normal":
        return x * (1 + step % 4)
    if kind == "peaked":
        x = x * 1.5 - 5
        top = torch.randint(0, vocab, (rows, 32), generator=gen, device=gen.device)
        return x.scatter_(1, top, torch.rand((rows, 32), generator=gen, device=gen.device) * 8 + 12)
    if kind == "ties":
        return torch.round(x * 4) / 2
    if kind == "coarse":
        return torch.round(x * 0.5)
    if kind == "bf16":
        return (x * 6).to(torch.bfloat16).float()
    assert kind == "flat"
    return torch.zeros_like(x)


def _reference(sampler: RunSampler, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(greedy ids [S], kept bool [S, V]) of the torch ops from `sampler`'s own penalty state (before its step)."""
    t = sampler.tensors
    x = logits.float()
    if sampler.penalties is not None and t.any_penalties:
        x = sampler.penalties.apply(x, t)
    return x.argmax(dim=-1), torch.isfinite(filtered(x, t))


def _compare(params: list[SamplingParams], vocab: int, kind: str, steps: int, offset: int = 0) -> None:
    """Steps of `params` through the kernel and the torch ops. `offset` 1 starts every row 4 bytes past a 16-byte
    boundary (the kernel's first pass then reads one float at a time)."""
    module = load_extension("mk_interpreter")
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(vocab + 7 * KINDS.index(kind) + offset)
    S = len(params)
    histories = [TokenHistory(prompt=[t % vocab for t in range(s, 40 * s + 1, 3)], output=[s % vocab, (s + 1) % vocab])
                 for s in range(S)]
    noise = NoiseTables(vocab)
    keys, counters = [1000 + s for s in range(S)], [5 * s for s in range(S)]
    fused = RunSampler(params, keys, histories, counters, steps, noise, dev, kernel=module)
    plain = RunSampler(params, keys, histories, counters, steps, noise, dev)
    assert fused.kernel is not None and plain.kernel is None
    exact = [not p.is_greedy and (p.top_p >= 1.0 or p.top_p < TOP_P_FLOOR) for p in params]
    same = total = 0
    for step in range(steps):
        logits = _logits(kind, S, vocab + offset, step, gen)[:, offset:]
        if fused.penalties is not None:  # each step from the same penalty state, whatever earlier draws did
            plain.penalties.counts.copy_(fused.penalties.counts)
            plain.penalties.seen.copy_(fused.penalties.seen)
        greedy, kept = _reference(fused, logits)
        a = fused.step(logits, step).long()
        b = plain.step(logits, step).long()
        assert bool(fused.records["valid"][step].all())
        for s, p in enumerate(params):
            if p.is_greedy:
                assert a[s] == b[s] == greedy[s], (step, s)
            elif exact[s]:
                assert kept[s, a[s]], f"step {step} row {s} ({p}): token {int(a[s])} is dropped by the torch ops"
        same += int((a == b).sum())
        total += S
    assert same >= total - max(2, total // 100), f"{total - same} of {total} draws differ"
    torch.cuda.synchronize()


@pytest.mark.parametrize("vocab", [1000, 128256])
def test_kernel_draws_what_the_torch_ops_draw(vocab: int) -> None:
    _compare(ROWS, vocab, "normal", 24)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("vocab", [128256, 32003, 1001])
def test_every_path_in_one_launch(vocab: int, kind: str) -> None:
    """vocab 32003 and 1001: slices of unequal length, rows off 16-byte boundaries; 1001: blocks hold fewer tokens
    than k (their bound is none: they send every token)."""
    _compare(MIXED, vocab, kind, 12)


@pytest.mark.parametrize("kind", ["normal", "peaked", "ties"])
def test_rows_off_16_byte_boundaries(kind: str) -> None:
    _compare(MIXED, 128256, kind, 8, offset=1)


def test_many_rows_in_one_launch() -> None:
    """More clusters than the GPU runs at once (8 SMs each)."""
    _compare(MIXED * 4, 32003, "peaked", 6)


def test_invalid_rows_fail_alone() -> None:
    module = load_extension("mk_interpreter")
    dev = torch.device("cuda")
    vocab = 128256
    params = [MIXED[5], MIXED[5], MIXED[4], MIXED[1], MIXED[0]]
    histories = [TokenHistory([1, 2, 3], [4]) for _ in params]
    noise = NoiseTables(vocab)
    fused = RunSampler(params, list(range(len(params))), histories, [0] * len(params), 1, noise, dev, kernel=module)
    plain = RunSampler(params, list(range(len(params))), histories, [0] * len(params), 1, noise, dev)
    logits = torch.randn((len(params), vocab), generator=torch.Generator(device=dev).manual_seed(3), device=dev)
    logits[1, 77] = float("nan")
    logits[2, 100000] = float("inf")
    a = fused.step(logits, 0).long()
    b = plain.step(logits, 0).long()
    assert fused.records["valid"][0].tolist() == [True, False, False, True, True]
    assert a[1] == a[2] == 0
    assert a[4] == b[4]  # greedy: exact
    assert int((a != b).sum()) <= 1  # row 0 or 3 may differ at a rounding near-tie


def _draw_frequencies(p: SamplingParams, logits: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(the kernel's frequency of every token over n draws of one row, the torch ops' filtered distribution)."""
    module = load_extension("mk_interpreter")
    vocab = logits.shape[1]
    sampler = RunSampler([p], [7], [TokenHistory((), ())], [0], n, NoiseTables(vocab), logits.device, kernel=module)
    assert sampler.kernel is not None
    for step in range(n):
        sampler.step(logits, step)
    counts = torch.bincount(sampler.records["ids"][:, 0].long(), minlength=vocab).double() / n
    want = torch.softmax(filtered(logits.float(), sampler.tensors).double(), dim=-1)[0]
    return counts.cpu(), want.cpu()


def test_kernel_follows_the_filtered_distribution() -> None:
    """Thousands of draws of one row (its counter advancing) match softmax over what top-p keeps."""
    dev = torch.device("cuda")
    probs = torch.tensor([0.5, 0.25, 0.15, 0.06, 0.04], device=dev)
    counts, want = _draw_frequencies(SamplingParams(temperature=1.0, top_p=0.85), torch.log(probs)[None], 4000)
    assert torch.allclose(want, torch.tensor([0.5, 0.25, 0.15, 0.0, 0.0]).double() / 0.9, atol=1e-6)
    assert torch.allclose(counts, want, atol=0.03), counts


@pytest.mark.parametrize("top_p", [1.0, 0.6, 0.4])
@pytest.mark.parametrize("background", ["spread", "flat"])
def test_ties_at_the_kth_value_are_all_kept(background: str, top_p: float) -> None:
    """top_k=2 over 2.0 and three 1.0s in three other blocks: all four kept (filters.py keeps ties), by top-k through
    candidates ("spread": every block's bound is tight) or the radix passes ("flat": every block's tokens tie at its
    bound and overflow its room). top_p 0.6 ends inside the tied group (all of it kept), 0.4 before it."""
    dev = torch.device("cuda")
    vocab = 128256
    gen = torch.Generator(device=dev).manual_seed(5)
    if background == "spread":
        logits = torch.randn((1, vocab), generator=gen, device=dev) - 10
    else:
        logits = torch.full((1, vocab), -20.0, device=dev)
    logits[0, 3] = 2.0
    logits[0, [20000, 50000, 100000]] = 1.0
    logits[0, 127000] = 0.5
    counts, want = _draw_frequencies(SamplingParams(temperature=1.0, top_k=2, top_p=top_p), logits, 4000)
    kept = [3] if top_p == 0.4 else [3, 20000, 50000, 100000]
    assert set(torch.nonzero(want).flatten().tolist()) == set(kept)
    assert set(torch.nonzero(counts).flatten().tolist()) <= set(kept)
    assert torch.allclose(counts, want, atol=0.03), counts[kept]


def test_top_k_with_top_p_on_a_tiny_vocabulary() -> None:
    """5 tokens: one block holds 4, one block 1, six none; top-k 3, then top-p 0.7 of the renormalised three
    (4/9, 3/9, 2/9: the first two)."""
    dev = torch.device("cuda")
    probs = torch.tensor([0.4, 0.3, 0.2, 0.06, 0.04], device=dev)
    counts, want = _draw_frequencies(SamplingParams(temperature=1.0, top_k=3, top_p=0.7), torch.log(probs)[None],
                                     4000)
    assert torch.allclose(want, torch.tensor([4 / 7, 3 / 7, 0.0, 0.0, 0.0]).double(), atol=1e-6)
    assert torch.allclose(counts, want, atol=0.03), counts
