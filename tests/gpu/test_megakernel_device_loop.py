"""The bench's on-device decode loop (engine/bench/megakernel_runner.py) in each of its launch modes: the advance
kernel or ARGMAX_REDUCE feeding ids back (fold_advance; with fold_embed also the next step's embedding row, the
streams then having no EMBED), plain launches or programmatic dependent launch (pdl, where a step's blocks start
while the previous step ends). Each run's tokens are checked step by step against
the torch reference, teacher-forced on them: a step that read stale step args, activations or KV would pick a
token far from the reference's argmax."""
from __future__ import annotations

import pytest
import torch

from engine.backends.cuda_backend import CudaBackend
from engine.bench.model_source import random_weights
from engine.bench.megakernel_runner import PAGE_SIZE, decode_on_device
from tests.gpu.mk_helpers import follows_reference, small

pytestmark = pytest.mark.gpu

PROMPT, NEW = 7, 40


@pytest.mark.parametrize("pdl,fold,embed", [(False, False, False), (True, False, False), (False, True, False),
                                            (True, True, False), (False, True, True), (True, True, True)])
def test_device_loop_tokens_follow_reference(pdl: bool, fold: bool, embed: bool) -> None:
    cfg = small(hidden=512, heads=8, kv=2, hd=64, inter=1024, layers=3, vocab=2048)
    dev = torch.device("cuda")
    weights = random_weights(cfg, torch.bfloat16, dev, seed=5)
    pages = -(-(PROMPT + NEW) // PAGE_SIZE)
    prompt = torch.randint(0, cfg.vocab_size, (PROMPT,), generator=torch.Generator().manual_seed(2)).tolist()
    mk = CudaBackend(weights, num_pages=pages, page_size=PAGE_SIZE, pdl=pdl, fold_advance=fold, fold_embed=embed,
                     embed_in_stream=not embed)
    tokens, seconds = decode_on_device(mk, prompt, NEW)
    assert len(tokens) == NEW and seconds > 0

    exact = follows_reference(weights, prompt, tokens, PAGE_SIZE, f"pdl={pdl} fold={fold} embed={embed}")
    assert exact >= int(0.8 * NEW), f"pdl={pdl} fold={fold} embed={embed}: only {exact}/{NEW} steps on the reference's argmax"
