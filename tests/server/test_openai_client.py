"""The official `openai` client against a real uvicorn server: completions and chat, streaming and not."""
from __future__ import annotations

import httpx
import openai
import pytest

from server_testlib import MAX_MODEL_LEN, MODEL_NAME, ServerThread, make_engine, wait_ready


@pytest.fixture(scope="module")
def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=60)


def _stream_text(stream) -> tuple[str, list, object]:
    text, finishes, usage = "", [], None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
            assert chunk.choices == []
            continue
        (choice,) = chunk.choices
        text += choice.text
        finishes.append(choice.finish_reason)
    return text, finishes, usage


def test_completion_greedy_stream_equals_non_stream(client: openai.OpenAI) -> None:
    kw = dict(model=MODEL_NAME, prompt="The quick brown fox", max_tokens=12, temperature=0)
    full = client.completions.create(**kw)
    assert full.object == "text_completion" and full.model == MODEL_NAME
    (choice,) = full.choices
    assert choice.finish_reason in ("length", "stop") and choice.text
    assert full.usage.completion_tokens <= 12
    assert full.usage.total_tokens == full.usage.prompt_tokens + full.usage.completion_tokens
    text, finishes, usage = _stream_text(client.completions.create(
        **kw, stream=True, stream_options={"include_usage": True}))
    assert text == choice.text
    assert finishes[-1] == choice.finish_reason and all(f is None for f in finishes[:-1])
    assert usage is not None and usage.model_dump() == full.usage.model_dump()


def test_chat_greedy_stream_equals_non_stream(client: openai.OpenAI) -> None:
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "What is 2+2?"}]
    full = client.chat.completions.create(model=MODEL_NAME, messages=msgs, max_completion_tokens=10,
                                          temperature=0, extra_body={"skip_special_tokens": False})
    assert full.object == "chat.completion"
    (choice,) = full.choices
    assert choice.message.role == "assistant" and choice.message.content
    assert full.usage.prompt_tokens > 10  # the chat template adds headers
    stream = client.chat.completions.create(model=MODEL_NAME, messages=msgs, max_tokens=10, temperature=0,
                                            stream=True, stream_options={"include_usage": True},
                                            extra_body={"skip_special_tokens": False})
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    body = [c for c in chunks if c.choices]
    assert body[-1].choices[0].finish_reason == choice.finish_reason
    assert all(c.choices[0].finish_reason is None for c in body[:-1])
    assert "".join(c.choices[0].delta.content or "" for c in body) == choice.message.content


def test_prompt_forms_and_n(client: openai.OpenAI) -> None:
    ids = client.post("/../tokenize", body={"prompt": "once upon a time"}, cast_to=httpx.Response).json()
    one = client.completions.create(model=MODEL_NAME, prompt="once upon a time", max_tokens=5, temperature=0)
    by_ids = client.completions.create(model=MODEL_NAME, prompt=ids["tokens"], max_tokens=5, temperature=0)
    assert by_ids.choices[0].text == one.choices[0].text
    many = client.completions.create(model=MODEL_NAME, prompt=["once upon a time", "hello"], max_tokens=5,
                                     temperature=0, n=2)
    assert [c.index for c in many.choices] == [0, 1, 2, 3]
    assert many.choices[0].text == many.choices[1].text == one.choices[0].text  # greedy: n copies
    lists = client.completions.create(model=MODEL_NAME, prompt=[ids["tokens"], [5, 6, 7]], max_tokens=3,
                                      temperature=0)
    assert lists.choices[0].text == one.choices[0].text[: len(lists.choices[0].text)]
    assert many.usage.prompt_tokens == ids["count"] + len(
        client.post("/../tokenize", body={"prompt": "hello"}, cast_to=httpx.Response).json()["tokens"])


def test_seeded_sampling_reproducible(client: openai.OpenAI) -> None:
    kw = dict(model=MODEL_NAME, prompt="random words:", max_tokens=8, temperature=1.0, seed=7, n=2)
    a = client.completions.create(**kw, extra_body={"top_k": 50})
    b = client.completions.create(**kw, extra_body={"top_k": 50})
    assert [c.text for c in a.choices] == [c.text for c in b.choices]
    assert a.choices[0].text != a.choices[1].text  # choice i samples with seed + i


def test_stop_and_logprobs(client: openai.OpenAI) -> None:
    base = client.completions.create(model=MODEL_NAME, prompt="abc", max_tokens=10, temperature=0,
                                     extra_body={"ignore_eos": True})
    text = base.choices[0].text
    assert len(text) >= 4
    stop = text[2:4]
    cut = client.completions.create(model=MODEL_NAME, prompt="abc", max_tokens=10, temperature=0, stop=[stop])
    assert cut.choices[0].finish_reason == "stop" and cut.choices[0].text == text[: text.index(stop)]
    lp = client.completions.create(model=MODEL_NAME, prompt="abc", max_tokens=4, temperature=0, logprobs=3)
    info = lp.choices[0].logprobs
    assert len(info.tokens) == len(info.token_logprobs) == len(info.top_logprobs) == 4
    assert all(len(t) == 3 for t in info.top_logprobs) and all(x <= 0 for x in info.token_logprobs)
    assert "".join(info.tokens) == lp.choices[0].text
    chat = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "x"}],
                                          max_tokens=3, temperature=0, logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert len(content) == 3 and all(len(t.top_logprobs) == 2 for t in content)
    assert content[0].top_logprobs[0].logprob >= content[0].top_logprobs[1].logprob


def test_models_tokenize_detokenize(client: openai.OpenAI, base_url: str) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL_NAME]
    with httpx.Client(base_url=base_url, timeout=30) as http:
        toks = http.post("/tokenize", json={"prompt": "héllo wörld ✓"}).json()["tokens"]
        assert http.post("/detokenize", json={"tokens": toks}).json()["prompt"].endswith("héllo wörld ✓")
        chat = http.post("/tokenize", json={"messages": [{"role": "user", "content": "hi"}]}).json()
        assert chat["count"] == len(chat["tokens"]) > 3
        assert http.get("/health").status_code == 200


def test_echo_stop_token_ids_and_context_limit(client: openai.OpenAI) -> None:
    plain = client.completions.create(model=MODEL_NAME, prompt="xyz", max_tokens=6, temperature=0,
                                      extra_body={"ignore_eos": True})
    echoed = client.completions.create(model=MODEL_NAME, prompt="xyz", max_tokens=6, temperature=0, echo=True,
                                       extra_body={"ignore_eos": True})
    assert echoed.choices[0].text == "xyz" + plain.choices[0].text
    ids = client.post("/../tokenize", body={"prompt": "xyz", "add_special_tokens": False},
                      cast_to=httpx.Response).json()["tokens"]
    token_ids = client.post("/../tokenize", body={"prompt": plain.choices[0].text, "add_special_tokens": False},
                            cast_to=httpx.Response).json()["tokens"]
    assert ids and token_ids
    stopped = client.completions.create(model=MODEL_NAME, prompt="xyz", max_tokens=6, temperature=0,
                                        extra_body={"ignore_eos": True, "stop_token_ids": [token_ids[0]]})
    assert stopped.choices[0].finish_reason == "stop" and stopped.choices[0].stop_reason == token_ids[0]
    assert stopped.usage.completion_tokens == 1
    # An explicit max_tokens beyond the context is a 400 giving both lengths (as vLLM) ...
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL_NAME, prompt=[9] * 250, max_tokens=100, temperature=0)
    assert "250" in str(info.value) and str(MAX_MODEL_LEN) in str(info.value)
    # ... while the default (16) is cut to what fits: generation ends at max_model_len with "length".
    long = client.completions.create(model=MODEL_NAME, prompt=[9] * 250, temperature=0,
                                     extra_body={"ignore_eos": True})
    assert long.choices[0].finish_reason == "length" and long.usage.total_tokens == MAX_MODEL_LEN


def test_multibyte_stream_deltas(client: openai.OpenAI, base_url: str) -> None:
    """Prompting with the bytes of multi-byte characters makes the model emit raw byte tokens; the
    streamed deltas must still concatenate to exactly the non-streamed text (a random model also
    emits invalid byte sequences, which decode to U+FFFD in both)."""
    with httpx.Client(base_url=base_url, timeout=60) as http:
        ids = http.post("/tokenize", json={"prompt": "héllo ✓ 日本語 ü"}).json()["tokens"]
    for prompt in (ids, ids[:4], "日本語 ✓"):
        kw = dict(model=MODEL_NAME, prompt=prompt, max_tokens=24, temperature=0, extra_body={"ignore_eos": True})
        full = client.completions.create(**kw).choices[0].text
        text, _finishes, _usage = _stream_text(client.completions.create(**kw, stream=True))
        assert text == full


@pytest.mark.slow
def test_real_model_chat_through_the_official_client() -> None:
    """SmolLM2-135M-Instruct served and asked with the openai client: real chat template, EOS, streaming."""
    from engine.cli.default_model import SMOLLM2_135M_INSTRUCT, ModelUnavailable, ensure_model
    from engine.cuda_build import cache_root
    from server.app import build_app

    try:
        model_dir = ensure_model(SMOLLM2_135M_INSTRUCT, cache_root() / "models")
    except ModelUnavailable as exc:
        pytest.skip(f"the real model cannot be fetched here: {exc}")
    engine = make_engine(model_dir, dtype="bfloat16")
    with ServerThread(build_app(engine, served_model_name="smollm2")) as srv:
        wait_ready(srv.async_engine)
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0, timeout=60)
        messages = [{"role": "user", "content": "What is the capital of France?"}]
        r = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=32, temperature=0)
        assert r.choices[0].message.content.strip() == "The capital of France is Paris."
        assert r.choices[0].finish_reason == "stop"
        stream = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=32, temperature=0,
                                                stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text == r.choices[0].message.content


def test_echo_with_logprobs_scores_the_prompt_as_evaluation_harnesses_read_it(client: openai.OpenAI) -> None:
    """lm-evaluation-harness's local-completions loglikelihood request: echo, logprobs 1, max_tokens 1,
    temperature 0; it sums token_logprobs[ctxlen:-1] and checks greedy-ness against top_logprobs."""
    prompt = [5, 17, 300, 42, 9, 77, 100, 3]
    body = dict(model=MODEL_NAME, prompt=prompt, max_tokens=1, temperature=0, logprobs=1, echo=True)
    out = client.completions.create(**body)
    lp = out.choices[0].logprobs
    assert lp is not None and len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(prompt) + 1
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(v is not None and v <= 0 for v in lp.token_logprobs[1:])
    assert all(len(top) >= 1 for top in lp.top_logprobs[1:])
    assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0
    # The prompt's logprobs equal a longer prompt's (causal: the suffix cannot change them); streaming gives the
    # same entries.
    longer = client.completions.create(**{**body, "prompt": prompt + [11, 12]}).choices[0].logprobs
    assert longer is not None
    assert all(abs(a - b) < 1e-4 for a, b in zip(lp.token_logprobs[1:len(prompt)], longer.token_logprobs[1:]))
    streamed: list = []
    for chunk in client.completions.create(**body, stream=True):
        if chunk.choices and chunk.choices[0].logprobs is not None:
            streamed.extend(chunk.choices[0].logprobs.token_logprobs)
    assert streamed[0] is None and len(streamed) == len(prompt) + 1
    assert all(abs(a - b) < 1e-6 for a, b in zip(streamed[1:], lp.token_logprobs[1:]))
