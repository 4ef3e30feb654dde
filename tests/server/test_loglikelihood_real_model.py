"""Loglikelihood scoring the way lm-evaluation-harness's `local-completions` model does it, through the server on
the real model (SmolLM2-135M-Instruct, fp32, torch backend): a small task file of (context, continuation) pairs,
each sent as token ids with echo, logprobs 1, max_tokens 1 and temperature 0; the continuation's score is
sum(token_logprobs[len(context):-1]) and it is greedy when every continuation token is its position's top
logprob. Both must equal transformers on the same ids (the harness's `hf` model) to within 1e-3."""
from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest
import torch

from server_testlib import ServerThread, make_engine, wait_ready

pytestmark = pytest.mark.slow

TASK = [{"context": "The capital of France is", "continuation": " Paris"},
        {"context": "The capital of France is", "continuation": " Berlin"},
        {"context": "Water boils at 100 degrees", "continuation": " Celsius at sea level."},
        {"context": "1, 2, 3, 4,", "continuation": " 5"}]


def test_task_scores_equal_transformers(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.cli.default_model import SMOLLM2_135M_INSTRUCT, ModelUnavailable, ensure_model
    from engine.cuda_build import cache_root
    from server.app import build_app

    try:
        model_dir = ensure_model(SMOLLM2_135M_INSTRUCT, cache_root() / "models")
    except ModelUnavailable as exc:
        pytest.skip(f"the real model cannot be fetched here: {exc}")
    task_file = tmp_path / "task.jsonl"
    task_file.write_text("".join(json.dumps(d) + "\n" for d in TASK))
    docs = [json.loads(line) for line in task_file.read_text().splitlines()]
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    pairs = [(tok(d["context"], add_special_tokens=False).input_ids,
              tok(d["continuation"], add_special_tokens=False).input_ids) for d in docs]

    ref = AutoModelForCausalLM.from_pretrained(str(model_dir), torch_dtype=torch.float32).eval()
    want = []
    with torch.no_grad():
        for ctx, cont in pairs:
            ids = torch.tensor([ctx + cont])
            logp = torch.log_softmax(ref(ids).logits[0, :-1].double(), dim=-1)
            rows = logp[len(ctx) - 1:]
            chosen = rows.gather(1, torch.tensor(cont)[:, None]).squeeze(1)
            want.append((float(chosen.sum()), bool((rows.argmax(-1) == torch.tensor(cont)).all())))

    engine = make_engine(model_dir)
    with ServerThread(build_app(engine, served_model_name="smollm2")) as srv:
        wait_ready(srv.async_engine)
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0, timeout=120)
        got = []
        for ctx, cont in pairs:
            out = client.completions.create(model="smollm2", prompt=ctx + cont, max_tokens=1, temperature=0,
                                            logprobs=1, echo=True)
            lp = out.choices[0].logprobs
            assert lp is not None
            scores = lp.token_logprobs[len(ctx):-1]
            tops = lp.top_logprobs[len(ctx):-1]
            greedy = all(max(top, key=top.get) == t for top, t in zip(tops, lp.tokens[len(ctx):-1]))
            got.append((sum(scores), greedy))
    for (g, g_greedy), (w, w_greedy) in zip(got, want):
        assert abs(g - w) < 1e-3, (got, want)
        assert g_greedy == w_greedy
    assert got[0][0] > got[1][0]  # " Paris" is likelier than " Berlin"
