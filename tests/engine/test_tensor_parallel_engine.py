"""`LLM(..., tensor_parallel_size=N)` on the torch backend over CPU worker processes (gloo) and on the vm backend (the
megakernel's ranks' streams): the same greedy tokens and logprobs (<= 1e-4, fp32) as one process; sizes the ranks
cannot split refused before any weight loads; a worker that dies makes the next step fail naming it, instead of
hanging."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine import LLM, SamplingParams
from engine.errors import EngineFatalError
from tests.tp_helpers import assert_a_dead_worker_fails_the_next_call

PROMPTS = [[5, 17, 200, 42, 9, 77, 100, 3], [11, 13, 2]]
PARAMS = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, logprobs=0)


def _run(llm: LLM) -> list[tuple[list[int], list[float]]]:
    outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], PARAMS)
    return [(list(o.outputs[0].token_ids), [lp[t] for lp, t in zip(o.outputs[0].logprobs, o.outputs[0].token_ids)])
            for o in outs]


def test_two_ranks_decode_what_one_process_decodes(tiny_checkpoint: str) -> None:
    want = _run(LLM(tiny_checkpoint, backend="torch", dtype="float32", progress=False, num_pages=16))
    llm = LLM(tiny_checkpoint, backend="torch", dtype="float32", progress=False, num_pages=16, tensor_parallel_size=2)
    try:
        got = _run(llm)
    finally:
        llm.close()
    for (tokens, lps), (want_tokens, want_lps) in zip(got, want):
        assert tokens == want_tokens
        assert max(abs(a - b) for a, b in zip(lps, want_lps)) <= 1e-4


def test_sizes_the_ranks_cannot_split_are_refused_naming_the_field(tiny_checkpoint: str) -> None:
    with pytest.raises(ValueError, match="num_key_value_heads"):  # the tiny preset has 2 KV heads
        LLM(tiny_checkpoint, backend="torch", dtype="float32", progress=False, tensor_parallel_size=4)


def test_the_megakernels_ranks_on_the_vm_decode_what_one_process_decodes(tiny_checkpoint: str) -> None:
    """backend vm: every rank's instruction streams (TP_ALLREDUCE inside) in one process, as the GPUs run them."""
    want = _run(LLM(tiny_checkpoint, backend="torch", dtype="float32", progress=False, num_pages=16))
    llm = LLM(tiny_checkpoint, backend="vm", dtype="float32", progress=False, num_pages=16, tensor_parallel_size=2)
    got = _run(llm)
    assert len(llm.engine.backend.ranks) == 2
    for (tokens, lps), (want_tokens, want_lps) in zip(got, want):
        assert tokens == want_tokens
        assert max(abs(a - b) for a, b in zip(lps, want_lps)) <= 1e-4


def test_a_dead_rank_fails_the_next_step_naming_it(tiny_checkpoint: str) -> None:
    llm = LLM(tiny_checkpoint, backend="torch", dtype="float32", progress=False, num_pages=16, tensor_parallel_size=2)
    assert_a_dead_worker_fails_the_next_call(llm, PROMPTS[0], PARAMS)


def test_a_rank_lost_inside_a_run_fails_it_naming_the_rank_at_once(tiny_checkpoint: str) -> None:
    llm = LLM(tiny_checkpoint, backend="torch", dtype="float32", progress=False, num_pages=64, tensor_parallel_size=2)
    try:
        worker = llm.engine.backend.ranks.workers[0]
        threading.Timer(0.5, lambda: os.kill(worker.pid, signal.SIGKILL)).start()
        t0 = time.monotonic()
        with pytest.raises(EngineFatalError, match="tensor-parallel rank 1 exited"):
            llm.generate({"prompt_token_ids": PROMPTS[0]}, SamplingParams(temperature=0, max_tokens=900,
                                                                          ignore_eos=True))
        assert time.monotonic() - t0 < 30  # the collective fails as the rank's connection closes, not by timeout
    finally:
        llm.close()


def test_a_script_without_a_main_guard_runs_ranks(tiny_checkpoint: str, tmp_path: Path) -> None:
    """The workers are fresh interpreters: a user's script is not imported again in them."""
    script = tmp_path / "two_ranks.py"
    script.write_text(
        "from engine import LLM, SamplingParams\n"
        f"llm = LLM({tiny_checkpoint!r}, backend='torch', dtype='float32', progress=False, num_pages=16, "
        "tensor_parallel_size=2)\n"
        "out = llm.generate({'prompt_token_ids': [5, 6, 7]}, SamplingParams(temperature=0, max_tokens=3))\n"
        "print('tokens', len(out[0].outputs[0].token_ids))\n"
        "llm.close()\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240,
                          cwd=str(Path(__file__).resolve().parents[2]))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tokens 3" in done.stdout
