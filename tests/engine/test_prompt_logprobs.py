"""prompt_logprobs: every prompt token after the first gets the model's logprob (and the top k), equal to the
reference teacher-forced on the prompt, on every backend, alongside requests that do not ask for it."""
from __future__ import annotations

import pytest
import torch

from engine import LLM, SamplingParams
from engine.backends.torch_backend import TorchBackend
from engine.bench.logprob_error import teacher_forced
from models.llama.config import LlamaConfig
from models.llama.weights import load_weights

PROMPT = [5, 17, 300, 42, 9, 77, 1000, 3, 64, 128, 7, 11, 13, 500, 2, 19, 23]


@pytest.mark.parametrize("backend", ["torch", "vm"])
def test_prompt_logprobs_equal_the_teacher_forced_reference(tiny_checkpoint: str, backend: str) -> None:
    cfg = LlamaConfig.from_dir(tiny_checkpoint)
    llm = LLM(tiny_checkpoint, backend=backend, dtype="float32", progress=False, max_num_seqs=4, num_pages=64)
    scored = SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True, prompt_logprobs=2, logprobs=1)
    plain = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)
    outs = llm.generate([{"prompt_token_ids": PROMPT}, {"prompt_token_ids": PROMPT[:7]}], [scored, plain])
    lps = outs[0].prompt_logprobs
    assert outs[1].prompt_logprobs is None and len(outs[1].outputs[0].token_ids) == 5
    assert lps is not None and len(lps) == len(PROMPT) and lps[0] is None
    weights = load_weights(tiny_checkpoint, cfg, dtype=torch.float32, device=torch.device("cpu"), progress=False)
    ref = teacher_forced(TorchBackend(weights, num_pages=8, page_size=16, device=torch.device("cpu")),
                         PROMPT[:1], PROMPT[1:])
    for i, tok in enumerate(PROMPT[1:], start=1):
        entry = lps[i]
        assert entry is not None and tok in entry and 2 <= len(entry) <= 3
        assert abs(entry[tok] - float(ref[i - 1])) < 1e-4
        assert all(v <= 0 for v in entry.values())
    # The generated tokens are the same as without scoring: the prompt computed one token per step is the
    # same prompt.
    again = llm.generate({"prompt_token_ids": PROMPT}, SamplingParams(temperature=0.0, max_tokens=3,
                                                                      ignore_eos=True))[0]
    assert again.outputs[0].token_ids == outs[0].outputs[0].token_ids
    assert llm.engine.get_stats().kv_pages_used == 0


def test_prompt_logprobs_out_of_range_is_refused() -> None:
    from engine.errors import RequestError
    with pytest.raises(RequestError, match="prompt_logprobs"):
        SamplingParams(prompt_logprobs=21)
