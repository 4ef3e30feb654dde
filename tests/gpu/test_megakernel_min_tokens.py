"""min_tokens on the cuda backend: the stop-id mask (engine/sampling/min_tokens.py) in front of the fused sampling
kernel (`sample_rows`) holds EOS back from greedy and sampled rows of a run until each reaches min_tokens, with the
rows still valid (the masked value is finite); greedy requests below min_tokens leave the in-kernel argmax for the
logits path; and the device's stop rules never end a row on a stop id before min_tokens. The model is the tiny
checkpoint with EOS ids over most of the vocabulary and every greedy first token, so without min_tokens a request
ends at once."""
from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import torch

from engine import LLM, SamplingParams
from engine.sampling.noise import seed_key
from engine.sampling.penalties import TokenHistory
from engine.sampling.run_sampler import NoiseTables, RunSampler

pytestmark = pytest.mark.gpu

PROMPTS = ["Hello there", "The quick brown fox jumps", "a", "Numbers: 1 2 3 4 5 6 7"]
EOS_BELOW = 960
N = 24


def _llm(checkpoint: str, decode_steps: int) -> LLM:
    return LLM(checkpoint, backend="cuda", dtype="bfloat16", progress=False, decode_steps=decode_steps)


@pytest.fixture(scope="module")
def eos_checkpoint(tiny_checkpoint: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    free = _llm(tiny_checkpoint, 1).generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True))
    out = tmp_path_factory.mktemp("eos_ckpt_gpu") / "model"
    shutil.copytree(tiny_checkpoint, out)
    config = json.loads((out / "config.json").read_text())
    config["eos_token_id"] = sorted(set(range(EOS_BELOW)) | {o.outputs[0].token_ids[0] for o in free})
    (out / "config.json").write_text(json.dumps(config))
    return str(out)


@pytest.mark.parametrize("sampled", [False, True])
def test_runs_on_the_gpu_hold_eos_back_until_min_tokens(eos_checkpoint: str, sampled: bool) -> None:
    base = (SamplingParams(temperature=0.9, seed=4, max_tokens=N) if sampled
            else SamplingParams(temperature=0.0, max_tokens=N))
    params = [dataclasses.replace(base, min_tokens=10), base, dataclasses.replace(base, min_tokens=N),
              dataclasses.replace(base, min_tokens=3, ignore_eos=True, stop_token_ids=[1000, 1001])]
    got = {}
    for steps in (1, 16):
        llm = _llm(eos_checkpoint, steps)
        eos = set(llm.engine.config.eos_token_ids)
        outs = llm.generate(PROMPTS, params)
        for o, p in zip(outs, params):
            tokens, reason = o.outputs[0].token_ids, o.outputs[0].finish_reason
            held = eos | set(p.stop_token_ids)
            assert len(tokens) >= p.min_tokens and not held & set(tokens[:p.min_tokens]), (steps, p, tokens)
            if reason == "stop":
                assert len(tokens) > p.min_tokens
        assert llm.engine.get_stats().kv_pages_used == 0
        got[steps] = [o.outputs[0].token_ids for o in outs]
    if not sampled:
        assert got[1] == got[16]
        assert len(got[16][1]) == 1  # no min_tokens: the greedy first token is an EOS id
    assert len(got[16][2]) == N


@pytest.mark.parametrize("greedy", [True, False])
def test_the_sampling_kernel_draws_from_the_masked_logits(tiny_checkpoint: str, greedy: bool) -> None:
    """RunSampler with `sample_rows` over GPU logits whose argmax is an EOS id by far: rows below min_tokens draw the
    best other token, the count crossing min_tokens inside the run (different counts before it), a row without
    min_tokens draws EOS from the start; every row stays valid."""
    backend = _llm(tiny_checkpoint, 1).engine.backend
    if backend.sampling_kernel is None:
        pytest.skip("the cuda backend has no sampling kernel")
    vocab, eos, other, steps = 1024, 9, 500, 6
    logits = torch.zeros((3, vocab), device=backend.device)
    logits[:, eos], logits[:, other] = 30.0, 20.0
    base = SamplingParams(temperature=0.0 if greedy else 1.0, max_tokens=100)
    params = [dataclasses.replace(base, min_tokens=4), dataclasses.replace(base, min_tokens=4), base]
    keys = [seed_key(s) for s in (1, 2, 3)]
    sampler = RunSampler(params, keys, [TokenHistory((), ())] * 3, [0, 2, 0], steps, NoiseTables(vocab),
                         backend.device, backend.sampling_kernel, eos_ids=(eos,))
    assert sampler.kernel is not None
    for i in range(steps):
        sampler.step(logits, i)
    records = {name: t.cpu() for name, t in sampler.chunk(0, steps).items()}
    assert bool(records["valid"].all())
    by_row = [list(row) for row in zip(*records["ids"].tolist())]
    assert by_row == [[other] * 4 + [eos] * 2, [other] * 2 + [eos] * 4, [eos] * 6]
    assert sampler.counters.tolist() == [steps, steps + 2, steps]
