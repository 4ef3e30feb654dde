"""Stop checks on the GPU in runs of decode steps (csrc/interpreter/run_stop.cuh; CudaBackend.decode_steps with
`stops`). Three rows whose stop ids end them at different steps of a 32-step run, greedy and sampled: the tokens
handed back are those of the same run without device stops, cut at the step where the last row stopped; the
launches the host had queued past that step did no work (no KV slot past it written, the step args not advanced
past it) and left the stream as a step does (every counter, and the dynamic queue's head, where the launch count
says), so the next launch of the same stream, one step or a whole run, runs as before."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from engine import LLM, SamplingParams
from engine.backends.cuda_backend import CudaBackend
from engine.cuda.device_decode_run import READBACK_STEPS
from engine.instructions.layout import SA_OFF_CONTEXT_LENS, SA_OFF_POSITIONS, SA_OFF_TOKEN_IDS
from engine.cuda.device_stream import DeviceStream
from engine.run_stops import (RS_HEADER_WORDS, RS_IDS_PER_ROW, RS_ROW_GENERATED, RS_ROW_STOPPED, RS_ROW_WORDS,
                              RS_RUNNING, RS_STOPPED_AT, RunStops, run_stops)
from engine.sampling.noise import seed_key
from engine.sampling.penalties import TokenHistory
from engine.sampling.run_sampler import NoiseTables, Records, RunSampler
from models.llama.step_batch import StepBatch
from tests.gpu.mk_helpers import small
from tests.vm.helpers import random_weights

pytestmark = pytest.mark.gpu

PAGE = 16
STEPS = 32
PROMPT_LENS = (5, 12, 20)
# Each row stops at its first token, at or after its target step, that it did not produce before. The scaled
# random weights (tests/vm/helpers.py) give well separated logits, so greedy rows do not repeat one token.
TARGETS = (3, 9, 17)
SENTINEL = 7.0  # written into the run's KV slots beforehand (exact in bf16): a slot that keeps it was not written
SEEDS = (11, 12, 13)


@dataclasses.dataclass(frozen=True)
class Setup:
    backend: CudaBackend
    batch: StepBatch  # the run's first step: each row's first generated token after its prompt
    ds: DeviceStream  # the stream of that shape, which every run and step of the test launches
    first_step: list[int]  # the greedy ids of one plain launch of `batch`
    tables: list[list[int]]
    vocab: int


def _setup(policy: str) -> Setup:
    cfg = small(hidden=512, heads=8, kv=2, hd=64, inter=1024, layers=3, vocab=2048)
    pages = -(-(max(PROMPT_LENS) + STEPS + 1) // PAGE)
    backend = CudaBackend(random_weights(cfg, seed=7), num_pages=3 * pages, page_size=PAGE, policy=policy)
    tables = [list(range(r * pages, (r + 1) * pages)) for r in range(3)]
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, cfg.vocab_size, (n,), generator=gen).tolist() for n in PROMPT_LENS]
    first = [backend.prefill(p, t) for p, t in zip(prompts, tables)]
    batch = StepBatch.build([[t] for t in first], list(PROMPT_LENS), tables, device=backend.batch_device,
                            page_size=PAGE)
    first_step = backend.greedy(batch).tolist()
    assert backend.last is not None
    return Setup(backend, batch, backend.last, first_step, tables, cfg.vocab_size)


def _sampler(s: Setup) -> RunSampler:
    """Temperature 1, one seed per row: the same draws in every run from the same logits (counter-based noise)."""
    params = [SamplingParams(temperature=1.0, seed=seed, max_tokens=1000) for seed in SEEDS]
    return RunSampler(params, [seed_key(seed) for seed in SEEDS], [TokenHistory((), ())] * 3, [1, 1, 1], STEPS,
                      NoiseTables(s.vocab), s.backend.device, s.backend.sampling_kernel)


def _run(s: Setup, sampled: bool, stops: RunStops | None = None) -> tuple[list[list[int]], int]:
    """Every step handed back (ids per row) and the launches the run queued; the host never ends the run itself."""
    got: list[list[int]] = []

    def take(records: Records) -> bool:
        if "valid" in records:
            assert bool(records["valid"].all())
        got.extend(records["ids"].tolist())
        return True

    before = s.ds.epoch
    ran = s.backend.decode_steps(s.batch, STEPS, PAGE, take, _sampler(s) if sampled else None, stops=stops)
    assert ran == len(got) and s.backend.last is s.ds
    return got, s.ds.epoch - before  # one epoch per launch (no counter reset in so few)


def _stop_rules(ref: list[list[int]]) -> tuple[RunStops, list[int]]:
    """Per row one stop id, its first new token at or after its target (never the last of a readback chunk, so the
    host has queued launches past the last stop when it sees it), and the steps they stop at."""
    at = []
    for r, target in enumerate(TARGETS):
        row = [step[r] for step in ref]
        t = next((i for i in range(target, STEPS - 2 * READBACK_STEPS)
                  if row[i] not in row[:i] and i % READBACK_STEPS != READBACK_STEPS - 1), None)
        assert t is not None, f"row {r} repeats itself: {row}"
        at.append(t)
    assert len(set(at)) == 3, f"rows should stop at different steps: {at}"
    params = [SamplingParams(max_tokens=1000, stop_token_ids=[ref[t][r]]) for r, t in enumerate(at)]
    return run_stops(params, (), [1, 1, 1], [10_000] * 3), at


def _slot(s: Setup, r: int, pos: int) -> tuple[int, int]:
    return s.tables[r][pos // PAGE], pos % PAGE


def _poison_kv(s: Setup) -> None:
    for r, start in enumerate(PROMPT_LENS):
        for pos in range(start, start + STEPS):
            page, row = _slot(s, r, pos)
            s.backend.kv.k[:, page, :, row, :] = SENTINEL
            s.backend.kv.v[:, page, :, row, :] = SENTINEL


def _written(s: Setup, r: int, pos: int) -> bool:
    page, row = _slot(s, r, pos)
    return not bool((s.backend.kv.k[:, page, :, row, :] == SENTINEL).all())


def _check_no_work_after(s: Setup, got: list[list[int]], last: int, at: list[int]) -> None:
    """The steps after `last` wrote no KV and did not advance the step args; the stop state says who stopped when."""
    for r, start in enumerate(PROMPT_LENS):
        assert all(_written(s, r, pos) for pos in range(start, start + last + 1)), f"row {r}: a step did not run"
        assert not any(_written(s, r, pos) for pos in range(start + last + 1, start + STEPS)), \
            f"row {r}: a launch after the run's stop at step {last} wrote KV"
    sa = s.ds.step_args.cpu().tolist()
    for r, start in enumerate(PROMPT_LENS):  # decode: token r is sequence r's
        assert sa[sa[SA_OFF_POSITIONS] + r] == start + last + 1  # advanced by the steps 0..last alone
        assert sa[sa[SA_OFF_CONTEXT_LENS] + r] == start + last + 2
        assert sa[sa[SA_OFF_TOKEN_IDS] + r] == got[last][r]
    state = s.backend.last_run_stop
    assert state is not None
    w = state.cpu().tolist()
    assert w[RS_STOPPED_AT] == last and w[RS_RUNNING] == 0
    k = w[RS_IDS_PER_ROW]
    for r, t in enumerate(at):
        record = w[RS_HEADER_WORDS + r * (RS_ROW_WORDS + k):]
        assert record[RS_ROW_STOPPED] == 1 and record[RS_ROW_GENERATED] == t + 1, (r, t, record[:RS_ROW_WORDS])


def _check_stream_consistent(s: Setup) -> None:
    """Every launch of the stream, skipped or not, moved each counter by its period and the dynamic head by a round
    of claims: the next launch's goals (epoch * period + target) are the ones it finds."""
    torch.cuda.synchronize()
    ds = s.ds
    period = ds.counter_period.cpu()
    assert torch.equal(ds.counters.cpu()[:period.numel()], ds.epoch * period)
    if ds.dynamic:
        assert int(ds.queue_head.item()) == ds.epoch * (ds.queue_len + ds.grid)


@pytest.mark.parametrize("sampled", [False, True])
@pytest.mark.parametrize("policy", ["lpt", "dynamic"])
def test_rows_stop_on_the_device_and_later_launches_do_nothing(policy: str, sampled: bool) -> None:
    s = _setup(policy)
    ref, launches = _run(s, sampled)
    if not sampled:
        assert ref[0] == s.first_step
    assert len(ref) == STEPS == launches
    again, _ = _run(s, sampled)
    assert again == ref, "two runs without device stops differ: this test needs a deterministic run"
    stops, at = _stop_rules(ref)
    last = max(at)
    assert stops.stopped_at(ref) == last

    _poison_kv(s)
    got, launches = _run(s, sampled, stops)
    assert got == ref[:last + 1]  # each row's tokens up to its stop (and the others' until the last one's)
    assert launches > last + 1, "the host queued no launch past the stop: nothing was skipped"
    _check_no_work_after(s, got, last, at)
    _check_stream_consistent(s)

    # The same stream's next launches run normally: one plain step, then a whole run without device stops.
    assert s.backend.greedy(s.batch).tolist() == s.first_step
    after, _ = _run(s, sampled)
    assert after == ref
    _check_stream_consistent(s)


def _first_new(ids: list[int], at: int) -> list[int]:
    return next(([t] for i, t in enumerate(ids) if i >= at and t not in ids[:i]), [])


def test_engine_requests_end_at_their_stop_ids_in_device_checked_runs(tiny_checkpoint: str) -> None:
    """LLM.generate on the cuda backend, sampled rows with stop ids inside a long run: each request ends at the first
    occurrence of its stop id (or its max_tokens), and the run's device state says every row stopped."""
    base = SamplingParams(temperature=1.0, max_tokens=40)
    llm = LLM(tiny_checkpoint, backend="cuda", dtype="bfloat16", progress=False, decode_steps=64)
    prompts = [{"prompt_token_ids": [3 + i, 40 + i, 500 + i]} for i in range(3)]
    free = [o.outputs[0].token_ids for o in llm.generate(
        prompts, [dataclasses.replace(base, seed=seed, ignore_eos=True) for seed in SEEDS])]
    params = [dataclasses.replace(base, seed=seed, ignore_eos=True, stop_token_ids=_first_new(ids, at))
              for seed, ids, at in zip(SEEDS, free, (4, 10, 18))]
    outs = [o.outputs[0] for o in llm.generate(prompts, params)]
    for out, p in zip(outs, params):
        ids, stop = out.token_ids, p.stop_token_ids
        if stop and stop[0] in ids:
            assert ids.index(stop[0]) == len(ids) - 1 and out.finish_reason == "stop" and out.stop_reason == stop[0]
        else:
            assert len(ids) == p.max_tokens and out.finish_reason == "length"
    assert llm.engine.get_stats().kv_pages_used == 0
    assert llm.engine.backend.last_run_stop is not None  # the engine's runs hand the backend their rows' rules
