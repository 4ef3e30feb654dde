"""Step records (device tensors) turned into each row's token, logprobs or failure on the host; and
`sample_batch`, one step for a batch of requests (a row that cannot sample fails alone)."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType

import torch

from engine.sampling.filters import step_logprobs
from engine.sampling.penalties import TokenHistory
from engine.sampling.run_sampler import NoiseTables, Records, RunSampler
from engine.sampling_params import SamplingParams

NON_FINITE = "the model produced non-finite logits (NaN or inf) for this request"


@dataclass(frozen=True)
class SampleResult:
    """Per row: the token id (None if the row failed), its logprobs, and the failure (None if it sampled)."""

    token_ids: list[int | None]
    logprobs: list[dict[int, float] | None]
    errors: list[str | None]


def logprob_entry(token: int, chosen: float, top_ids: Sequence[int], top_values: Sequence[float]) -> dict[int, float]:
    """One token's logprobs as the outputs carry them: the top k and the token itself ({token_id: logprob})."""
    entry = {int(i): float(v) for i, v in zip(top_ids, top_values)}
    entry[int(token)] = float(chosen)
    return entry


def step_results(records: Records, step: int, params: Sequence[SamplingParams],
                 failures: Mapping[tuple[int, int], str] | None = None, first: int = 0) -> SampleResult:
    """Row by row, step `step` of host-side `records`, whose step 0 is the run's step `first` (the key of
    `failures`, the sampler's messages for rows that failed)."""
    ids = records["ids"][step].tolist()
    valid = records["valid"][step].tolist() if "valid" in records else [True] * len(ids)
    has_lp = "lp_chosen" in records
    chosen = records["lp_chosen"][step].tolist() if has_lp else []
    values = records["lp_top_values"][step].tolist() if has_lp else []
    top_ids = records["lp_top_ids"][step].tolist() if has_lp else []
    out = SampleResult(token_ids=[], logprobs=[], errors=[])
    for row, p in enumerate(params):
        if not valid[row]:
            out.token_ids.append(None)
            out.logprobs.append(None)
            out.errors.append((failures or {}).get((first + step, row), NON_FINITE))
            continue
        tok = int(ids[row])
        lp: dict[int, float] | None = None
        if p.logprobs is not None and has_lp:
            lp = logprob_entry(tok, chosen[row], top_ids[row][:p.logprobs], values[row][:p.logprobs])
        out.token_ids.append(tok)
        out.logprobs.append(lp)
        out.errors.append(None)
    return out


def to_host(records: Records) -> Records:
    return {name: t.cpu() for name, t in records.items()}


def start_to_host(records: Records) -> Callable[[], Records]:
    """Queue the copy of `records` to the host now and return what waits for it. A GPU's records go to pinned
    buffers in stream order behind the work queued so far, so waiting for them never waits for work queued later
    (the engine's next step, launched ahead)."""
    if all(t.device.type != "cuda" for t in records.values()):
        host = {name: t.clone() for name, t in records.items()}
        return lambda: host
    host = {name: torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for name, t in records.items()}
    for name, t in records.items():
        host[name].copy_(t, non_blocking=True)
    event = torch.cuda.Event()
    event.record()

    def wait() -> Records:
        event.synchronize()
        return host
    return wait


def sample_batch(logits: torch.Tensor, params: Sequence[SamplingParams], keys: Sequence[int],
                 histories: Sequence[TokenHistory] | None = None, counters: Sequence[int] | None = None,
                 noise: NoiseTables | None = None, kernel: ModuleType | None = None,
                 eos_ids: Sequence[int] = ()) -> SampleResult:
    """Sample one token per row of `logits` [S, V] (on any device) with each row's params, noise key, token
    history (penalties) and counter (its number of generated tokens; default 0); with `kernel` on a GPU in one
    launch of its `sample_rows`. A row whose counter is below its min_tokens cannot draw `eos_ids` or its
    stop_token_ids. Raises only for a malformed call; a row's own failure lands in `errors[row]`."""
    S = len(params)
    histories = list(histories) if histories is not None else [TokenHistory((), ())] * S
    counters = list(counters) if counters is not None else [0] * S
    if logits.dim() != 2 or not logits.shape[0] == S == len(keys) == len(histories) == len(counters):
        raise ValueError(f"logits {tuple(logits.shape)} vs {S} params / {len(keys)} keys / {len(histories)} "
                         f"histories / {len(counters)} counters")
    sampler = RunSampler(params, keys, histories, counters, 1, noise or NoiseTables(logits.shape[1]),
                         logits.device, kernel, eos_ids)
    sampler.step(logits, 0)
    return step_results(to_host(sampler.chunk(0, 1)), 0, params, sampler.failures)


def prompt_token_logprobs(logits: torch.Tensor, next_ids: Sequence[int],
                          ks: Sequence[int]) -> list[dict[int, float] | None]:
    """Per row of `logits` [R, V]: the raw logprob of `next_ids[r]` and the top `ks[r]`, or None where the row is
    not finite (on the logits' device; only the asked-for values reach the host)."""
    ids = torch.tensor(list(next_ids), dtype=torch.int64, device=logits.device)
    valid = torch.isfinite(logits).all(dim=-1)
    k = min(max(ks, default=0), logits.shape[1])
    chosen, values, top_ids = (t.cpu() for t in step_logprobs(logits, ids, valid, k))
    out: list[dict[int, float] | None] = []
    for r, ok in enumerate(valid.tolist()):
        if not ok:
            out.append(None)
            continue
        out.append(logprob_entry(next_ids[r], chosen[r], top_ids[r, :ks[r]].tolist(), values[r, :ks[r]].tolist()))
    return out
