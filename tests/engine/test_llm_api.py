"""The offline LLM API end to end on the tiny preset (torch backend, CPU, float32)."""
from __future__ import annotations

import pytest
import torch

from engine import LLM, SamplingParams
from engine.errors import RequestError

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
PROMPTS = ["Hello there, how are", "A much longer prompt that crosses a page boundary " * 3, "x"]


@pytest.fixture(scope="module")
def llm(tiny_checkpoint: str) -> LLM:
    return LLM(tiny_checkpoint, backend="torch", dtype="float32", progress=False, max_num_seqs=8)


def test_generate_shapes_and_text(llm: LLM) -> None:
    outs = llm.generate(PROMPTS, GREEDY)
    assert [o.request_id for o in outs] == sorted({o.request_id for o in outs}, key=[o.request_id for o in outs].index)
    tok = llm.get_tokenizer()
    for prompt, out in zip(PROMPTS, outs):
        assert out.prompt == prompt
        assert out.prompt_token_ids == tok.encode(prompt)
        comp = out.outputs[0]
        assert len(comp.token_ids) == 12 and comp.finish_reason == "length"
        assert comp.text == tok.decode(comp.token_ids, skip_special_tokens=True)


def test_token_id_prompts_equal_string_prompts(llm: LLM) -> None:
    ids = llm.get_tokenizer().encode(PROMPTS[0])
    a = llm.generate(PROMPTS[0], GREEDY)[0].outputs[0].token_ids
    b = llm.generate({"prompt_token_ids": ids}, GREEDY)[0].outputs[0].token_ids
    assert a == b


def test_greedy_is_batch_invariant(llm: LLM) -> None:
    together = [o.outputs[0].token_ids for o in llm.generate(PROMPTS, GREEDY)]
    alone = [llm.generate(p, GREEDY)[0].outputs[0].token_ids for p in PROMPTS]
    assert together == alone


def test_continuous_batching_joins_and_leaves(llm: LLM) -> None:
    engine = llm.engine
    expected = {f"cb{i}": llm.generate(p, SamplingParams(temperature=0, max_tokens=4 + 3 * i, ignore_eos=True))[0]
                .outputs[0].token_ids for i, p in enumerate(PROMPTS)}
    finished = {}
    engine.add_request("cb0", PROMPTS[0], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    step = 0
    while engine.has_unfinished_requests() or step < 3:
        if step == 1:
            engine.add_request("cb1", PROMPTS[1], SamplingParams(temperature=0, max_tokens=7, ignore_eos=True))
        if step == 2:
            engine.add_request("cb2", PROMPTS[2], SamplingParams(temperature=0, max_tokens=10, ignore_eos=True))
        for out in engine.step():
            if out.finished:
                finished[out.request_id] = out.outputs[0].token_ids
        step += 1
    assert finished == expected
    assert engine.get_stats().kv_pages_used == 0


def test_seeded_sampling_reproduces_and_ignores_batch(llm: LLM) -> None:
    p = SamplingParams(temperature=1.0, top_p=0.9, top_k=50, seed=7, max_tokens=10, ignore_eos=True)
    a = llm.generate(PROMPTS[0], p)[0].outputs[0].token_ids
    b = llm.generate([PROMPTS[1], PROMPTS[0]], p)[1].outputs[0].token_ids
    c = llm.generate(PROMPTS[0], SamplingParams(temperature=1.0, seed=8, max_tokens=10, ignore_eos=True))
    assert a == b
    assert c[0].outputs[0].token_ids != a


def test_logprobs_match_reference_logits(llm: LLM) -> None:
    out = llm.generate(PROMPTS[0], SamplingParams(temperature=0, max_tokens=3, logprobs=5, ignore_eos=True))[0]
    comp = out.outputs[0]
    assert comp.logprobs is not None and len(comp.logprobs) == 3
    first = comp.logprobs[0]
    assert comp.token_ids[0] in first and 5 <= len(first) <= 6
    # Independent check: log-softmax of the reference model's logits for the prompt.
    from models.llama.kv_cache import PagedKVCache
    from models.llama.model import LlamaModel
    from models.llama.step_batch import StepBatch
    backend = llm.engine.backend
    ids = out.prompt_token_ids
    kv = PagedKVCache.allocate(llm.engine.config, num_pages=8, page_size=16, dtype=torch.float32, device="cpu")
    batch = StepBatch.build([ids], [0], [list(range(8))], page_size=16)
    logits = LlamaModel(backend.model.weights if hasattr(backend.model, "weights") else backend.model.w).forward(batch, kv)[0] \
        if False else backend.model.forward(batch, kv)[0]
    ref = torch.log_softmax(logits, -1)
    top = torch.topk(ref, 5)
    assert set(top.indices.tolist()) <= set(first)
    for tok, lp in first.items():
        assert abs(lp - ref[tok].item()) < 1e-4


def test_stop_token_ids_and_stop_strings(llm: LLM) -> None:
    base = llm.generate(PROMPTS[0], GREEDY)[0].outputs[0]
    stop_tok = base.token_ids[3]
    out = llm.generate(PROMPTS[0], SamplingParams(temperature=0, max_tokens=12, stop_token_ids=[stop_tok],
                                                   ignore_eos=True))[0].outputs[0]
    first = base.token_ids.index(stop_tok)
    assert out.token_ids == base.token_ids[: first + 1]
    assert out.finish_reason == "stop" and out.stop_reason == stop_tok
    text = base.text
    if len(text) > 4:
        stop = text[2:4]
        out = llm.generate(PROMPTS[0], SamplingParams(temperature=0, max_tokens=12, stop=[stop],
                                                       ignore_eos=True))[0].outputs[0]
        assert out.finish_reason == "stop" and out.stop_reason == stop
        assert out.text == text[: text.index(stop)]


def test_eos_stops_unless_ignored(tiny_checkpoint: str) -> None:
    llm = LLM(tiny_checkpoint, backend="torch", dtype="float32", progress=False)
    base = llm.generate(PROMPTS[1], GREEDY)[0].outputs[0]
    eos = base.token_ids[2]
    # Pretend that token is an EOS id: the engine must stop on it, and ignore_eos must override.
    object.__setattr__(llm.engine.config, "eos_token_ids", (eos,))
    stopped = llm.generate(PROMPTS[1], SamplingParams(temperature=0, max_tokens=12))[0].outputs[0]
    assert stopped.token_ids == base.token_ids[: base.token_ids.index(eos) + 1]
    assert stopped.finish_reason == "stop"
    ignored = llm.generate(PROMPTS[1], GREEDY)[0].outputs[0]
    assert ignored.token_ids == base.token_ids


def test_chat_applies_template(llm: LLM) -> None:
    messages = [{"role": "user", "content": "Hi!"}]
    out = llm.chat(messages, GREEDY)[0]
    assert out.prompt_token_ids == llm.engine.apply_chat_template(messages)
    assert len(out.outputs[0].token_ids) == 12


def test_preemption_gives_identical_results(tiny_checkpoint: str) -> None:
    roomy = LLM(tiny_checkpoint, backend="torch", dtype="float32", progress=False)
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    prompts = [f"seq {i} " * (1 + i) for i in range(5)]
    tok = roomy.get_tokenizer()
    assert all(len(tok.encode(p)) + 24 <= 90 for p in prompts)
    expected = [o.outputs[0].token_ids for o in roomy.generate(prompts, params)]
    tight = LLM(tiny_checkpoint, backend="torch", dtype="float32", progress=False, num_pages=12,
                page_size=8, max_model_len=90)
    got = [o.outputs[0].token_ids for o in tight.generate(prompts, params)]
    assert got == expected
    assert tight.engine.get_stats().num_preemptions > 0
    assert tight.engine.get_stats().kv_pages_used == 0


def test_abort_frees_pages(llm: LLM) -> None:
    engine = llm.engine
    engine.add_request("ab", PROMPTS[1], SamplingParams(temperature=0, max_tokens=50, ignore_eos=True))
    engine.step()
    assert engine.get_stats().kv_pages_used > 0
    assert engine.abort("ab") is True
    assert engine.abort("ab") is False
    assert engine.get_stats().kv_pages_used == 0 and not engine.has_unfinished_requests()


@pytest.mark.parametrize("bad", [
    lambda llm: llm.generate({"prompt_token_ids": []}, GREEDY),
    lambda llm: llm.generate({"prompt_token_ids": [1] * 5000}, GREEDY),
    lambda llm: llm.generate({"prompt_token_ids": [10**9]}, GREEDY),
    lambda llm: llm.generate({"nope": 1}, GREEDY),
    lambda llm: SamplingParams(max_tokens=0),
    lambda llm: SamplingParams(temperature=-1),
    lambda llm: SamplingParams(top_p=0),
])
def test_bad_requests_raise_request_error_and_lose_nothing(llm: LLM, bad) -> None:
    with pytest.raises(RequestError):
        bad(llm)
    assert not llm.engine.has_unfinished_requests()
    assert llm.generate(PROMPTS[2], GREEDY)[0].outputs[0].finish_reason == "length"


def test_missing_model_dir_names_the_path(tmp_path) -> None:
    missing = tmp_path / "no_such_model"
    with pytest.raises(FileNotFoundError, match="no_such_model"):
        LLM(str(missing), backend="torch")


def test_weight_bytes_and_kv_reserve(tiny_checkpoint: str) -> None:
    from engine.engine_config import EngineConfig, kv_bytes_per_page, size_kv_cache
    from models.llama.config import LlamaConfig
    from models.llama.init_random import random_state_dict
    from models.llama.weights import expected_shapes, weights_from_state_dict

    cfg = LlamaConfig.from_dir(tiny_checkpoint)
    w = weights_from_state_dict(cfg, random_state_dict(cfg, seed=0), dtype=torch.float32)
    n_params = sum(int(torch.tensor(s).prod()) for s in expected_shapes(cfg).values())
    assert w.num_bytes() == 4 * n_params  # tied: the LM head is not counted twice
    ec = EngineConfig(model=tiny_checkpoint, num_pages=None, max_num_seqs=4, max_model_len=256, page_size=16)
    pages, max_len = size_kv_cache(ec, cfg, torch.device("cpu"))
    assert pages == 4 * 16 and max_len == 256
    assert kv_bytes_per_page(cfg, 16, torch.bfloat16) == 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * 16 * cfg.head_dim * 2
