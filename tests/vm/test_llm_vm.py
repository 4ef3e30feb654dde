"""End to end: LLM(backend="vm") generates exactly the torch backend's greedy tokens."""
from __future__ import annotations

from engine import LLM, SamplingParams

PROMPTS = ["Hello there, how are", "A longer prompt that crosses a page boundary " * 2, "x"]


def test_vm_backend_matches_torch(tiny_checkpoint: str) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    kw = dict(dtype="float32", progress=False, num_pages=96, max_num_seqs=4)
    want = [o.outputs[0].token_ids for o in LLM(tiny_checkpoint, backend="torch", **kw).generate(PROMPTS, params)]
    vm_llm = LLM(tiny_checkpoint, backend="vm", **kw)
    got = [o.outputs[0].token_ids for o in vm_llm.generate(PROMPTS, params)]
    assert got == want
    backend = vm_llm.engine.backend
    assert backend.cache.hits > 0  # decode steps reused a cached stream and only patched step args
    prof = backend.last_profile
    assert prof.simulated and prof.num_instructions == len(backend.last_stream.stream.instrs)
