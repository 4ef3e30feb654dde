"""--steps N means the same on every backend: N steps run, all of them recorded, laid back to back (with --chunk
the first is a prompt chunk)."""
from __future__ import annotations

import argparse
import types

import numpy as np
import pytest
from synthetic_profiles import make_chain_record

from profiler.deps import step_index
from profiler.marks import MARK_LAST_PAGE_CYCLES
from profiler.steps import STEP_GAP_NS, back_to_back, shifted


def test_shifted_moves_times_and_marks_but_not_cycles_or_unreached(rng):
    rec = make_chain_record(rng, layers=2)
    rec.marks_ns[0, 3] = 0  # a mark that was never reached stays 0
    moved = shifted(rec, 1000)
    assert np.array_equal(moved.start_ns, rec.start_ns + 1000) and np.array_equal(moved.end_ns, rec.end_ns + 1000)
    assert moved.marks_ns[0, 3] == 0 and moved.marks_ns[0, 0] == rec.marks_ns[0, 0] + 1000
    assert np.array_equal(moved.marks_ns[:, MARK_LAST_PAGE_CYCLES], rec.marks_ns[:, MARK_LAST_PAGE_CYCLES])


def test_back_to_back_lays_steps_end_to_start(rng):
    a, b = make_chain_record(rng, layers=2), make_chain_record(rng, layers=2)
    b = shifted(b, 10**9)  # as recorded on the GPU: far later, after the host's readback and next launch
    both = back_to_back([a, b])
    n = a.num_instructions
    assert both.num_instructions == 2 * n
    assert both.start_ns[n:].min() == a.end_ns.max() + STEP_GAP_NS
    assert np.array_equal(both.end_ns[n:] - both.start_ns[n:], b.end_ns - b.start_ns)  # inside a step: as recorded


def _args(**kw) -> argparse.Namespace:
    base = dict(preset="tiny", model=None, backend="vm", batch=1, prompt_len=8, steps=3, policy=None, num_sms=8,
                page_size=16, kernel_option=[], chunk=None)
    return argparse.Namespace(**{**base, **kw})


def test_vm_records_every_step_back_to_back():
    profiling = pytest.importorskip("engine.profiling")
    one = profiling.collect_profile(_args(steps=1))
    three = profiling.collect_profile(_args(steps=3))
    n = one.num_instructions
    assert three.num_instructions == 3 * n and step_index(three).max() == 2
    for k in (1, 2):  # each step starts right where the one before ended
        assert three.start_ns[k * n : (k + 1) * n].min() == three.end_ns[: k * n].max() + STEP_GAP_NS


def test_vm_profiles_sequences_of_several_lengths():
    """--prompt-lens: one sequence per length in each step (the meta lists them); per-sequence KV splits give the
    long one more attention instructions than a uniform count does."""
    profiling = pytest.importorskip("engine.profiling")
    from engine.instructions.format import W_OPERANDS
    from engine.instructions.registry import OPCODE_NAMES

    code = next(c for c, name in OPCODE_NAMES.items() if name == "ATTN_PARTIAL")

    def partials(rec, seq: int) -> int:  # noqa: ANN001 - ATTN_PARTIAL words of sequence `seq` (its first operand)
        return int(((rec.words[:, 0] == code) & (rec.words[:, W_OPERANDS] == seq)).sum())

    args = dict(steps=1, prompt_lens=(300, 9, 9), num_sms=32)
    uniform = profiling.collect_profile(_args(**args, kernel_option=["per_seq_splits=0"]))
    per_seq = profiling.collect_profile(_args(**args))  # the default
    assert uniform.meta["batch"] == 3 and uniform.meta["prompt_len"] == "300,9,9"
    assert partials(per_seq, 0) > partials(uniform, 0) and partials(per_seq, 1) <= partials(uniform, 1)


def test_cuda_records_every_step(monkeypatch, rng):
    """The cuda path on fakes (no GPU here): every one of the --steps steps is timed and recorded."""
    profiling = pytest.importorskip("engine.profiling")
    recorded: list[int] = []
    metas: list[dict] = []

    class Launch(int):
        """A launch's number, with the counts of the stream it ran in."""
        compiled = types.SimpleNamespace(shape=profiling.StepShape(48, 6, 64))

    class FakeBackend:
        num_sms = 4
        module = types.SimpleNamespace(TIMING_MARK0=5)

        def __init__(self, *a, **kw) -> None:
            self.timing, self.launches, self.last = False, 0, None

        def prefill(self, prompt, table) -> None:
            pass

        def greedy(self, batch):
            import torch

            self.launches += 1
            self.last = Launch(self.launches) if self.timing else None
            return torch.zeros(1, dtype=torch.int64)

    def fake_timing(last, mark0, meta):
        assert last is not None, "a step ran without timing"
        recorded.append(last)
        metas.append(meta)
        return shifted(make_chain_record(rng, layers=2), 10**6 * last)

    weights = types.SimpleNamespace(config=types.SimpleNamespace(vocab_size=100))
    monkeypatch.setattr(profiling, "load_bench_weights", lambda *a, **kw: (weights, "fake"))
    monkeypatch.setattr(profiling, "CudaBackend", FakeBackend)
    monkeypatch.setattr(profiling, "record_from_timing", fake_timing)
    monkeypatch.setattr(profiling.StepBatch, "build", staticmethod(lambda *a, **kw: None))
    monkeypatch.setattr(profiling.torch.cuda, "get_device_name", lambda: "fake GPU")
    rec = profiling.collect_cuda_profile(_args(backend="cuda", steps=5), {})
    assert recorded == [2, 3, 4, 5, 6]  # the first step ran twice (warm), then each of the 5 was recorded
    assert step_index(rec).max() == 4
    assert all(m["steps"] == 5 and "step" not in m for m in metas)  # the record is of all steps, not one
    assert all(m["stream"] == "48 tokens over 6 sequences" for m in metas)  # the stream each step ran in


def test_vm_profiles_a_prompt_chunk_then_decodes():
    """--chunk N: the first recorded step holds each sequence's last N prompt tokens, the later ones decode."""
    profiling = pytest.importorskip("engine.profiling")
    decode = profiling.collect_profile(_args(steps=1, prompt_len=40))
    chunked = profiling.collect_profile(_args(steps=2, prompt_len=40, chunk=32))
    assert chunked.meta["chunk"] == 32 and decode.meta["chunk"] == 0
    # the decode after the chunk is the plain profile's step (context 41); the chunk step is a step of 32 tokens
    assert step_index(chunked).max() == 1
    assert int((step_index(chunked) == 1).sum()) == decode.num_instructions
    batch = profiling.chunk_batch_of([40, 20], 8, 16)
    assert batch.positions.tolist() == list(range(32, 40)) + list(range(12, 20))
    with pytest.raises(ValueError, match="--chunk 41 is longer than the shortest prompt"):
        profiling.collect_profile(_args(steps=1, prompt_len=40, chunk=41))


def test_cuda_chunk_step_takes_the_prompts_last_tokens(monkeypatch):
    """The cuda path on fakes: the prompt is prefilled up to its last chunk, the chunk is the first recorded step
    (its tokens at their prompt positions), and the decode after it writes at the prompt's length."""
    profiling = pytest.importorskip("engine.profiling")
    built: list[tuple[list[list[int]], list[int]]] = []
    prefilled: list[int] = []

    class FakeBackend:
        num_sms, max_tokens_per_step = 4, 64
        module = types.SimpleNamespace(TIMING_MARK0=5)

        def __init__(self, *a, **kw) -> None:
            self.timing = False
            self.last = types.SimpleNamespace(compiled=types.SimpleNamespace(shape=profiling.StepShape(48, 2, 64)))

        def prefill(self, prompt, table) -> None:
            prefilled.append(len(prompt))

        def greedy(self, batch):
            import torch

            return torch.zeros(2, dtype=torch.int64)

    def fake_build(tokens, positions, tables, **kw):  # noqa: ANN001, ANN202
        built.append((tokens, positions))

    weights = types.SimpleNamespace(config=types.SimpleNamespace(vocab_size=100))
    monkeypatch.setattr(profiling, "load_bench_weights", lambda *a, **kw: (weights, "fake"))
    monkeypatch.setattr(profiling, "CudaBackend", FakeBackend)
    monkeypatch.setattr(profiling, "record_from_timing", lambda *a: make_chain_record(np.random.default_rng(0), 1))
    monkeypatch.setattr(profiling.StepBatch, "build", staticmethod(fake_build))
    monkeypatch.setattr(profiling.torch.cuda, "get_device_name", lambda: "fake GPU")
    profiling.collect_cuda_profile(_args(backend="cuda", steps=2, batch=2, prompt_len=40, chunk=24), {})
    assert prefilled == [16, 16]
    assert [len(t) for t in built[0][0]] == [24, 24] and built[0][1] == [16, 16]
    assert built[-1][1] == [40, 40] and [len(t) for t in built[-1][0]] == [1, 1]
    with pytest.raises(ValueError, match="more than a step of this kernel holds"):
        profiling.collect_cuda_profile(_args(backend="cuda", steps=1, batch=3, prompt_len=40, chunk=24), {})


def test_steps_help_says_what_it_means():
    from engine.cli.profile import STEPS_HELP

    assert "every one of them on every backend" in STEPS_HELP
