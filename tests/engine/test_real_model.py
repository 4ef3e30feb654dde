"""Real text through the engine with a real model (SmolLM2-135M-Instruct, engine/cli/default_model.py): the chat
template and EOS, a stop string, UTF-8 split across a real BPE tokenizer's tokens, and teacher-forced parity with
transformers for the torch and VM backends. Skipped, saying why, where the model cannot be fetched."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine import LLM, SamplingParams
from engine.cli.default_model import SMOLLM2_135M_INSTRUCT, ModelUnavailable, ensure_model
from engine.cuda_build import cache_root
from engine.detokenizer import OutputText

pytestmark = pytest.mark.slow

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def real_model() -> Path:
    try:
        return ensure_model(SMOLLM2_135M_INSTRUCT, cache_root() / "models")
    except ModelUnavailable as exc:
        pytest.skip(f"the real model cannot be fetched here: {exc}")


@pytest.fixture(scope="module")
def llm(real_model: Path) -> LLM:
    return LLM(str(real_model), backend="torch", progress=False)


def test_chat_answer_ends_at_eos(llm: LLM) -> None:
    out = llm.chat(QUESTION, SamplingParams(temperature=0, max_tokens=32))[0].outputs[0]
    assert out.text.strip() == "The capital of France is Paris." and out.finish_reason == "stop"


def test_stop_string_cuts_real_text(llm: LLM) -> None:
    out = llm.chat(QUESTION, SamplingParams(temperature=0, max_tokens=32, stop=[" Paris"]))[0].outputs[0]
    assert out.text == "The capital of France is" and out.stop_reason == " Paris"
    kept = llm.chat(QUESTION, SamplingParams(temperature=0, max_tokens=32, stop=[" Paris"],
                                             include_stop_str_in_output=True))[0].outputs[0]
    assert kept.text == "The capital of France is Paris"


def test_streamed_text_grows_exactly(llm: LLM) -> None:
    engine = llm.engine
    engine.add_request("s", {"prompt_token_ids": engine.apply_chat_template(QUESTION)},
                       SamplingParams(temperature=0, max_tokens=32, stop=["France is P"]))
    shown = ""
    while engine.has_unfinished_requests():
        for out in engine.step():
            assert out.outputs[0].text.startswith(shown)
            shown = out.outputs[0].text
    assert shown == "The capital of "  # cut right before the stop string


@pytest.mark.parametrize("text", ["café déjà vu", "日本語のテキスト", "emoji 😀🚀 and ∑∫ maths"])
def test_utf8_split_across_real_tokens(llm: LLM, text: str) -> None:
    tok = llm.engine.tokenizer
    ids = tok.encode(text, add_special_tokens=False)
    out = OutputText(tok, [], SamplingParams(max_tokens=len(ids)))
    seen = ""
    for i in ids:
        out.add(i)
        assert "\ufffd" not in out.visible() and out.visible().startswith(seen)
        seen = out.visible()
    out.finish()
    assert out.visible() == tok.decode(ids)


@pytest.mark.parametrize("backend", ["torch", "vm"])
def test_teacher_forced_logprobs_match_transformers(real_model: Path, backend: str) -> None:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(real_model), dtype=torch.float32, attn_implementation="eager")
    engine = LLM(str(real_model), backend=backend, dtype="float32", progress=False).engine
    ids = engine.tokenizer.encode("The quick brown fox jumps over the lazy dog because", add_special_tokens=False)
    with torch.no_grad():
        want = torch.log_softmax(hf(torch.tensor([ids])).logits[0, -1].float(), dim=-1)
    from models.llama.step_batch import StepBatch
    pages = -(-len(ids) // engine.engine_config.page_size)
    batch = StepBatch.build([ids], [0], [list(range(pages))], page_size=engine.engine_config.page_size)
    got = torch.log_softmax(engine.backend.forward(batch)[0].float(), dim=-1)
    assert (got - want).abs().max() < 2e-3, f"{backend}: max |logprob - transformers| {(got - want).abs().max()}"
