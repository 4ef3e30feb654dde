"""The bench's logprob column: teacher-forced logprobs of a row's own tokens against the fp32 reference."""
from __future__ import annotations

import torch

from engine.bench.baselines import RunResult
from engine.bench.logprob_error import logprob_errors, teacher_forced, teacher_forced_logits
from engine.backends.torch_backend import TorchBackend
from models.llama.init_random import random_state_dict
from models.llama.presets import preset_config
from models.llama.weights import LlamaWeights, weights_from_state_dict


def _weights(dtype: torch.dtype) -> LlamaWeights:
    cfg = preset_config("tiny")
    return weights_from_state_dict(cfg, random_state_dict(cfg, seed=3), dtype=dtype)


def test_teacher_forcing_scores_each_token_after_its_prefix() -> None:
    w = _weights(torch.float32)
    backend = TorchBackend(w, num_pages=8, page_size=16, device=torch.device("cpu"))
    prompt, tokens = [1, 2, 3, 4, 5], [7, 9, 11]
    lp = teacher_forced(backend, prompt, tokens)
    fresh = TorchBackend(w, num_pages=8, page_size=16, device=torch.device("cpu"))
    full = teacher_forced(fresh, prompt + tokens[:2], tokens[2:])  # the last token scored after a longer prompt
    assert lp.shape == (3,) and bool((lp <= 0).all())
    assert abs(float(lp[2]) - float(full[0])) < 1e-5


def test_rows_get_their_error_and_megakernel_rows_need_a_gpu() -> None:
    w32, w16 = _weights(torch.float32), _weights(torch.bfloat16)
    runs = [RunResult("eager", "ok", (3, 4, 5, 6), 0.01), RunResult("cuda_graph", "ok", (3, 4, 5, 6), 0.01),
            RunResult("megakernel", "ok", (3, 4, 5, 6), 0.01), RunResult("compile_graph", "skipped")]
    exact = logprob_errors(w32, [1, 2, 3], runs, lambda _m: None)
    assert set(exact) == {"eager", "cuda_graph"} and exact["eager"] < 1e-6  # fp32 rows are the reference
    rounded = logprob_errors(w16, [1, 2, 3], runs, lambda _m: None)
    assert 0 < rounded["eager"] == rounded["cuda_graph"] < 0.1  # bf16 rounding, on the same tokens


def test_long_prompts_prefill_in_bounded_chunks() -> None:
    """A long prompt is prefilled in chunks (the fp32 reference's score matrix of one 32k-token step would not fit a
    GPU); the logprobs are those of one whole-prompt step."""
    w = _weights(torch.float32)
    prompt, tokens = list(range(1, 40)), [7, 9]
    seen: list[int] = []

    class Counting(TorchBackend):
        def forward(self, batch):  # noqa: ANN001, ANN202 - records each step's token count
            seen.append(batch.num_tokens)
            return super().forward(batch)

    whole = teacher_forced(TorchBackend(w, num_pages=8, page_size=16, device=torch.device("cpu")), prompt, tokens)
    chunked = list(teacher_forced_logits(
        Counting(w, num_pages=8, page_size=16, device=torch.device("cpu")), prompt, tokens, prefill_chunk=16))
    assert seen == [16, 16, 7, 1]
    lp = torch.stack([torch.log_softmax(x.double(), -1)[t] for x, t in zip(chunked, tokens)])
    assert torch.allclose(lp, whole, atol=1e-5), (lp, whole)


def test_greedy_rows_get_their_gap_to_the_reference_argmax() -> None:
    """The greedy gap: 0 for a row that took the reference's argmax at every step, large for one whose tokens the
    reference ranks far below its best (a wrong computation of the timed row); sampled rows get none."""
    from engine.bench.logprob_error import teacher_forced_scores

    w32 = _weights(torch.float32)
    prompt = [1, 2, 3]
    ref = TorchBackend(w32, num_pages=8, page_size=16, device=torch.device("cpu"))
    tokens: list[int] = []
    for _ in range(4):  # the reference's own greedy continuation
        logits = list(teacher_forced_logits(ref, prompt, [*tokens, 0]))[-1]
        tokens.append(int(logits.argmax()))
        ref = TorchBackend(w32, num_pages=8, page_size=16, device=torch.device("cpu"))
    lp, best = teacher_forced_scores(ref, prompt, tokens)
    assert torch.allclose(lp, best)
    worst = [int(x.argmin()) for x in teacher_forced_logits(
        TorchBackend(w32, num_pages=8, page_size=16, device=torch.device("cpu")), prompt, tokens)]
    runs = [RunResult("engine-torch", "ok", tuple(tokens), 0.01), RunResult("megakernel", "ok", tuple(worst), 0.01),
            RunResult("engine-torch-sampled", "ok", tuple(worst), 0.01)]
    regrets: dict[str, float] = {}
    logprob_errors(w32, prompt, runs, lambda _m: None, regrets)
    assert regrets["engine-torch"] < 1e-9 and regrets["megakernel"] > 1.0 and "engine-torch-sampled" not in regrets
