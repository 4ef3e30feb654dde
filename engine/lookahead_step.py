"""One engine step launched ahead of the host (engine/lookahead.py): its batch with the previous step's ids fed on
the device, its sampling queued right behind it, its records on their way to the host; and, once they are there,
each row's token or failure."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from engine.backends.base import Backend
from engine.backends.step_feed import StepHandle, TokenFeed
from engine.decode_runs import Failed, Sampled, kernel_samples, states_sampler
from engine.request_state import RequestState
from engine.sampling.results import start_to_host, step_results
from engine.sampling.run_sampler import NoiseTables, Records, RunSampler
from engine.scheduler.requests.request_scheduler import SchedulerOutput
from engine.sequence import Sequence
from models.llama.step_batch import StepBatch


@dataclass
class InFlight:
    """A launched step. `rows`: its sampling chunks (indices into plan.chunks), in the order of `ids`, the sampled
    ids on the device (the next step's feed); `placeholders`: seq_id -> (sequence, index of the placeholder token
    it holds for this step's sampled one), filled once the step's chunks count as computed."""

    plan: SchedulerOutput
    rows: list[int]
    handle: StepHandle
    ids: torch.Tensor | None
    sampler: RunSampler | None
    records: Callable[[], Records]
    placeholders: dict[str, tuple[Sequence, int]] = field(default_factory=dict)
    # id(sequence) -> its position in `ids`, built at the first row_of: the next step's feed asks for every row, and a
    # scan per row cost a 128-sequence step ~8 000 comparisons of the host's time
    _row_by_seq: dict[int, int] | None = field(default=None, repr=False)

    def row_of(self, seq: Sequence) -> int | None:
        """The position in `ids` of `seq`'s sampled id, if this step samples for it (the plan holds its sequences, so
        their ids stay theirs while it lives)."""
        if self._row_by_seq is None:
            self._row_by_seq = {id(self.plan.chunks[i].seq): k for k, i in enumerate(self.rows)}
        return self._row_by_seq.get(id(seq))


def token_feed(plan: SchedulerOutput, prev: InFlight | None) -> TokenFeed | None:
    """Which slots of `plan`'s flattened tokens hold a placeholder for one of `prev`'s sampled ids, and which."""
    if prev is None or prev.ids is None or not prev.placeholders:
        return None
    src: list[int] = []
    dst: list[int] = []
    offset = 0
    for chunk in plan.chunks:
        held = prev.placeholders.get(chunk.seq_id)
        if held is not None and held[0] is chunk.seq and chunk.start_pos <= held[1] < chunk.context_len:
            row = prev.row_of(chunk.seq)
            if row is None:  # cannot happen: a placeholder is only given to a sampling chunk
                raise ValueError(f"token_feed: {chunk.seq_id!r} holds a placeholder its step does not sample")
            src.append(row)
            dst.append(offset + held[1] - chunk.start_pos)
        offset += chunk.num_tokens
    return TokenFeed(prev.ids, tuple(src), tuple(dst)) if src else None


def launch_step(backend: Backend, plan: SchedulerOutput, prev: InFlight | None,
                requests: Mapping[str, RequestState], noise: NoiseTables, page_size: int,
                eos_ids: Sequence[int] = ()) -> InFlight:
    """Start `plan` on the backend (fed from `prev`), queue its sampling and the copy of its records to the host;
    `eos_ids`: the model's, which rows below their min_tokens cannot draw (engine/sampling/min_tokens.py)."""
    chunks = plan.chunks
    rows = [i for i, c in enumerate(chunks) if c.samples]
    states = [requests[chunks[i].seq_id] for i in rows]
    batch = StepBatch.build([list(c.token_ids) for c in chunks], [c.start_pos for c in chunks],
                            [list(c.block_table) for c in chunks], device=backend.batch_device, page_size=page_size)
    greedy = kernel_samples(states)
    handle = backend.launch_step(batch, greedy, token_feed(plan, prev))
    sampler: RunSampler | None = None
    ids: torch.Tensor | None = None
    if rows and greedy:
        assert handle.ids is not None
        ids = handle.ids[torch.tensor(rows, dtype=torch.int64, device=handle.ids.device)]
        records: Records = {"ids": ids}
    elif rows:
        assert handle.logits is not None
        logits = handle.logits[torch.tensor(rows, dtype=torch.int64, device=handle.logits.device)]
        # Counters: each request's generated tokens before this one, placeholders of the step before included,
        # as in a step without look-ahead, so seeded noise draws the same tokens.
        sampler = states_sampler(states, 1, backend, noise, eos_ids)
        ids = sampler.step(logits, 0)
        records = sampler.chunk(0, 1)
    else:
        records = {}
    return InFlight(plan, rows, handle, ids, sampler, start_to_host(records))


def step_tokens(step: InFlight, requests: Mapping[str, RequestState]) -> tuple[Sampled, Failed]:
    """Wait for `step` and return its rows' tokens and failures (rows of requests gone since are left out)."""
    step.handle.wait()
    records = step.records()
    chunks = [step.plan.chunks[i] for i in step.rows]
    sampled: Sampled = {}
    failed: Failed = {}
    if not chunks:
        return sampled, failed
    if step.sampler is None:
        results = [(int(t), None, None) for t in records["ids"].tolist()]
    else:
        out = step_results(records, 0, step.sampler.params, step.sampler.failures)
        results = list(zip(out.token_ids, out.logprobs, out.errors))
    for c, (tok, lp, error) in zip(chunks, results):
        state = requests.get(c.seq_id)
        if state is None or state.seq is not c.seq:
            continue
        if tok is None:
            failed[c.seq_id] = error or "sampling produced no token"
        else:
            sampled[c.seq_id] = (tok, lp)
    return sampled, failed
