"""Every output of a request carries its prompt ids as one list made once (engine/request_state.py): a per-token copy
cost each token of a long prompt's request O(prompt length); the sequence's own list is never handed out."""
from __future__ import annotations

from engine import LLMEngine, SamplingParams


def test_outputs_share_one_copy_of_the_prompt(tiny_checkpoint: str) -> None:
    engine = LLMEngine(tiny_checkpoint, backend="torch", dtype="float32", progress=False, max_num_seqs=2,
                       num_pages=32, decode_steps=1)
    prompt = list(range(3, 40))
    engine.add_request("r", {"prompt_token_ids": prompt}, SamplingParams(max_tokens=5, ignore_eos=True, temperature=0))
    seq = engine._requests["r"].seq
    outs = []
    while engine.has_unfinished_requests():
        outs += engine.step()
    assert len(outs) == 5 and all(o.prompt_token_ids == prompt for o in outs)
    assert all(o.prompt_token_ids is outs[0].prompt_token_ids for o in outs)
    assert outs[0].prompt_token_ids is not seq.prompt_token_ids
