"""The sampling kernel's fused advance (SampleArgs::step_args, csrc/interpreter/sampling/sample_rows.cuh): one launch
that draws a step's ids and advances the decode step's args from them leaves the step args, the run's stop state
and the records exactly as the plain launch followed by the advance kernel (csrc/interpreter/advance.cuh) does, for
a row of every sampling path in one launch, launched with and without PDL; a failed step (its error word set)
advances nothing; a run that stopped at an earlier step neither draws nor advances."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from engine.backends.cuda_backend import CudaBackend
from engine.cuda.device_stream import DeviceStream
from engine.run_stops import RS_HEADER_WORDS, RS_NOT_STOPPED, RS_STOPPED_AT, run_stops
from engine.sampling.penalties import TokenHistory
from engine.sampling.run_sampler import NoiseTables, RunSampler, StepAdvance
from engine.sampling_params import SamplingParams
from models.llama.step_batch import StepBatch
from tests.gpu.mk_helpers import small
from tests.gpu.test_sample_rows_kernel import MIXED
from tests.vm.helpers import random_weights

pytestmark = pytest.mark.gpu

PAGE = 16
STEPS = 4


@dataclasses.dataclass(frozen=True)
class Setup:
    backend: CudaBackend
    ds: DeviceStream  # a decode step of len(MIXED) sequences, launched once: its logits are the rows to draw from
    params: list[SamplingParams]
    vocab: int


def _setup() -> Setup:
    cfg = small(hidden=512, heads=8, kv=2, hd=64, inter=1024, layers=2, vocab=4096)
    S = len(MIXED)
    pages = 4
    backend = CudaBackend(random_weights(cfg, seed=5), num_pages=S * pages, page_size=PAGE, pad_steps=False)
    tables = [list(range(r * pages, (r + 1) * pages)) for r in range(S)]
    batch = StepBatch.build([[(7 * r) % cfg.vocab_size] for r in range(S)], [3 + r for r in range(S)], tables,
                            device=backend.batch_device, page_size=PAGE)
    backend.greedy(batch)
    assert backend.last is not None
    return Setup(backend, backend.last, list(MIXED), cfg.vocab_size)


def _sampler(s: Setup) -> RunSampler:
    S = len(s.params)
    histories = [TokenHistory([(3 * r + j) % s.vocab for j in range(6)], [r % s.vocab]) for r in range(S)]
    return RunSampler(s.params, [900 + r for r in range(S)], histories, [2 * r for r in range(S)], STEPS,
                      NoiseTables(s.vocab), s.backend.device, s.backend.sampling_kernel)


def _state(s: Setup, stopped_at: int = RS_NOT_STOPPED) -> torch.Tensor:
    """A run's stop state whose rows stop at their budget of 2 tokens (so step 1 stops every row)."""
    S = len(s.params)
    words = run_stops([SamplingParams(max_tokens=2)] * S, (), [0] * S, [10_000] * S).words(S)
    state = torch.tensor(words, dtype=torch.int32, device=s.backend.device)
    state[RS_STOPPED_AT] = stopped_at
    return state


def _fused(s: Setup, step_args: torch.Tensor, status: torch.Tensor, state: torch.Tensor | None,
           pdl: bool) -> RunSampler:
    sampler = _sampler(s)
    logits = s.ds.acts["logits"][:len(s.params)]
    for step in range(STEPS):
        _ids, advanced = sampler.step_and_advance(logits, step, state.data_ptr() if state is not None else 0,
                                                  StepAdvance(step_args.data_ptr(), status.data_ptr()), pdl=pdl)
        assert advanced
    return sampler


def _separate(s: Setup, step_args: torch.Tensor, status: torch.Tensor, state: torch.Tensor | None) -> RunSampler:
    sampler = _sampler(s)
    S = len(s.params)
    logits = s.ds.acts["logits"][:S]
    history = torch.empty((STEPS, S), dtype=torch.int32, device=s.backend.device)
    stream = torch.cuda.current_stream(s.backend.device).cuda_stream
    run_stop = state.data_ptr() if state is not None else 0
    for step in range(STEPS):
        ids = sampler.step(logits, step, run_stop)
        s.backend.module.advance(step_args.data_ptr(), ids.data_ptr(), history.data_ptr(), step, status.data_ptr(),
                                 S, stream, run_stop=run_stop)
    return sampler


@pytest.mark.parametrize("pdl", [False, True])
@pytest.mark.parametrize("stops", [False, True])
def test_fused_advance_equals_the_advance_kernel(pdl: bool, stops: bool) -> None:
    s = _setup()
    base = s.ds.step_args.clone()
    sa_fused, sa_plain = base.clone(), base.clone()
    err_fused, err_plain = torch.zeros_like(s.ds.status), torch.zeros_like(s.ds.status)
    st_fused, st_plain = (_state(s), _state(s)) if stops else (None, None)
    fused = _fused(s, sa_fused, err_fused, st_fused, pdl)
    plain = _separate(s, sa_plain, err_plain, st_plain)
    torch.cuda.synchronize()
    # The same noise, filters and penalty state on both sides: the same ids (but for a top-p boundary on a near-tie
    # that float atomics in the radix passes may split: rare, and then every later word differs too). With stops,
    # the launches after the run's stop drew nothing: their records were never written.
    worked = 2 if stops else STEPS
    for name in ("ids", "valid"):
        assert torch.equal(fused.records[name][:worked], plain.records[name][:worked]), name
    assert torch.equal(sa_fused, sa_plain)
    assert not torch.equal(sa_fused, base)  # it did advance
    assert int(err_fused[0]) == int(err_plain[0]) == 0
    if stops:
        assert st_fused is not None and st_plain is not None
        assert torch.equal(st_fused, st_plain)
        assert int(st_fused[RS_STOPPED_AT]) == worked - 1  # every row's budget of 2 tokens ends the run there


def test_a_failed_step_advances_nothing() -> None:
    s = _setup()
    step_args = s.ds.step_args.clone()
    status = torch.zeros_like(s.ds.status)
    status[0] = 3  # some error code: the step's ids mean nothing
    before = step_args.clone()
    _fused(s, step_args, status, None, pdl=False)
    torch.cuda.synchronize()
    assert torch.equal(step_args, before)
    assert int(status[0]) == 3


def test_a_stopped_run_neither_draws_nor_advances() -> None:
    s = _setup()
    step_args = s.ds.step_args.clone()
    before = step_args.clone()
    state = _state(s, stopped_at=-1)  # stopped before step 0: every launch of the run does nothing
    state_before = state.clone()
    sampler = _sampler(s)
    sampler.records["ids"].fill_(-5)
    counters = sampler.counters.clone()
    sampler.step_and_advance(s.ds.acts["logits"][:len(s.params)], 0, state.data_ptr(),
                             StepAdvance(step_args.data_ptr(), torch.zeros_like(s.ds.status).data_ptr()), pdl=True)
    torch.cuda.synchronize()
    assert torch.equal(step_args, before) and torch.equal(state, state_before)
    assert torch.equal(sampler.counters, counters)
    assert bool((sampler.records["ids"][0] == -5).all())
    assert state.numel() >= RS_HEADER_WORDS
