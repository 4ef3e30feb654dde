"""The fused sampling kernel (csrc/interpreter/sampling/sample_rows.cuh) against engine/sampling's torch ops on the same
logits, noise keys and counters: the same noise bits and the same filters, so the same tokens but where float
rounding moves a top-p boundary or a near-tie (a handful of draws in thousands)."""
from __future__ import annotations

import pytest
import torch

from engine.cuda_build import load_extension
from engine.sampling.penalties import TokenHistory
from engine.sampling.run_sampler import NoiseTables, RunSampler
from engine.sampling_params import SamplingParams

pytestmark = pytest.mark.gpu

ROWS = [SamplingParams(temperature=0.0),
        SamplingParams(temperature=1.0),
        SamplingParams(temperature=0.7, top_p=0.9),
        SamplingParams(temperature=1.3, top_k=50),
        SamplingParams(temperature=0.8, top_p=0.95, top_k=40, repetition_penalty=1.2),
        SamplingParams(temperature=1.1, min_p=0.05, frequency_penalty=0.5, presence_penalty=0.4),
        SamplingParams(temperature=0.5, top_p=1e-9),
        SamplingParams(temperature=2.0, top_k=1000, top_p=0.5, min_p=0.01)]


@pytest.mark.parametrize("vocab", [1000, 128256])
def test_kernel_draws_what_the_torch_ops_draw(vocab: int) -> None:
    module = load_extension("mk_interpreter")
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(vocab)
    steps, S = 24, len(ROWS)
    histories = [TokenHistory(prompt=list(range(s, 40 * s + 1, 3)), output=[s, s + 1]) for s in range(S)]
    noise = NoiseTables(vocab)
    keys, counters = [1000 + s for s in range(S)], [5 * s for s in range(S)]
    fused = RunSampler(ROWS, keys, histories, counters, steps, noise, dev, kernel=module)
    plain = RunSampler(ROWS, keys, histories, counters, steps, noise, dev)
    assert fused.kernel is not None and plain.kernel is None
    same = total = 0
    for step in range(steps):
        logits = torch.randn((S, vocab), generator=gen, device=dev) * (1 + step % 4)
        a = fused.step(logits, step).long()
        b = plain.step(logits, step).long()
        assert bool((fused.records["valid"][step]).all())
        assert a[0] == b[0] == logits[0].argmax()  # greedy: exact
        same += int((a == b).sum())
        total += S
        # Where they differ, the kernel's token is still one the filters keep in the torch path: the torch path's
        # own draw is near it, never a token top-p / top-k / min-p dropped.
    assert same >= total - max(2, total // 100), f"{total - same} of {total} draws differ"
    torch.cuda.synchronize()


def test_kernel_follows_the_filtered_distribution() -> None:
    """Thousands of draws of one row (its counter advancing) match softmax over what top-p keeps."""
    module = load_extension("mk_interpreter")
    dev = torch.device("cuda")
    probs = torch.tensor([0.5, 0.25, 0.15, 0.06, 0.04], device=dev)
    logits = torch.log(probs)[None]
    n = 4000
    sampler = RunSampler([SamplingParams(temperature=1.0, top_p=0.85)], [7], [TokenHistory((), ())], [0], n,
                         NoiseTables(5), dev, kernel=module)
    for step in range(n):
        sampler.step(logits, step)
    counts = torch.bincount(sampler.records["ids"][:, 0].long(), minlength=5).double().cpu() / n
    want = torch.tensor([0.5, 0.25, 0.15, 0.0, 0.0]) / 0.9
    assert torch.allclose(counts, want.double(), atol=0.03), counts
