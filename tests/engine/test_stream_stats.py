"""The engine reports its backend's compiled-stream cache (hits, compiles, compile seconds), which /metrics exports:
a server operator sees how often a new step shape paused every request to compile its instruction stream."""
from __future__ import annotations

from engine import LLM, SamplingParams
from engine.scheduler.compiler.step_builder_cache import StreamStats


def test_the_vm_backend_counts_compiles_and_hits(tiny_checkpoint: str) -> None:
    llm = LLM(tiny_checkpoint, backend="vm", dtype="float32", progress=False, max_num_seqs=2, num_pages=32)
    before = llm.engine.get_stats()
    assert (before.stream_hits, before.stream_compiles, before.stream_compile_seconds) == (0, 0, 0.0)
    llm.generate([[5, 6, 7]], SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))
    after = llm.engine.get_stats()
    # a prompt step and decode steps: at least two shapes compiled, the later decodes reuse theirs
    assert after.stream_compiles >= 2 and after.stream_hits >= 1 and after.stream_compile_seconds > 0
    llm.generate([[5, 6, 7]], SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))
    again = llm.engine.get_stats()
    assert again.stream_compiles == after.stream_compiles and again.stream_hits > after.stream_hits


def test_backends_without_streams_report_none(tiny_checkpoint: str) -> None:
    llm = LLM(tiny_checkpoint, backend="torch", dtype="float32", progress=False, num_pages=32)
    llm.generate([[5, 6, 7]], SamplingParams(temperature=0.0, max_tokens=2))
    s = llm.engine.get_stats()
    assert (s.stream_hits, s.stream_compiles, s.stream_compile_seconds) == (0, 0, 0.0)


def test_stream_stats_add_up() -> None:
    assert StreamStats(1, 2, 0.5) + StreamStats(3, 4, 1.0) == StreamStats(4, 6, 1.5)
