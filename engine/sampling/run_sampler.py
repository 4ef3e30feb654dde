"""Sampling for a run of steps over one batch of sequences, entirely on the logits' device: per-row settings,
penalty counts and noise counters live there, and every step's results are kept in device buffers that the
backend hands back in chunks. The host is not between two steps."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

import torch

from engine.sampling.filters import sample_step, step_logprobs
from engine.sampling.min_tokens import MinTokensMask
from engine.sampling.noise import token_hashes
from engine.sampling.penalties import PenaltyState, TokenHistory
from engine.sampling.tensors import SamplingTensors
from engine.sampling_params import SamplingParams

# A chunk of step records: "ids" (int [k, S]) always; "valid" (bool [k, S]) and the logprob fields where the run
# samples with a RunSampler.
Records = dict[str, torch.Tensor]


class NoiseTables:
    """The vocabulary's token hashes per device (the same for every step: built once per device)."""

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab
        self._by_device: dict[torch.device, torch.Tensor] = {}

    def on(self, device: torch.device) -> torch.Tensor:
        if device not in self._by_device:
            self._by_device[device] = token_hashes(self.vocab, device)
        return self._by_device[device]


@dataclass(frozen=True)
class StepAdvance:
    """The on-device decode loop's next step, for a sampling launch that also advances it from its ids (the advance
    kernel's work, csrc/interpreter/advance.cuh): device addresses of the step args and of the step's error word."""

    step_args: int
    error: int


class RunSampler:
    """Samples step after step of one batch: `step(logits, i)` returns the int32 ids [S] (on the device) and
    records them (and validity, logprobs) at index i. `counters` is each row's number of generated tokens before
    the first step; penalties see every token sampled in the run; a row below its min_tokens cannot draw its stop
    ids (`eos_ids` and its stop_token_ids: engine/sampling/min_tokens.py)."""

    def __init__(self, params: Sequence[SamplingParams], keys: Sequence[int], histories: Sequence[TokenHistory],
                 counters: Sequence[int], steps: int, noise: NoiseTables, device: torch.device,
                 kernel: ModuleType | None = None, eos_ids: Sequence[int] = ()) -> None:
        """`kernel`: the CUDA extension with `sample_rows` (csrc/interpreter/sampling/sample_rows.cuh), which
        samples a step in one launch on a GPU; without it (or off the GPU) the step is whole-batch torch ops."""
        vocab = noise.vocab
        self.params, self.keys = list(params), list(keys)
        # (step, row) -> why that row could not sample at that step (its records say invalid)
        self.failures: dict[tuple[int, int], str] = {}
        self.tensors = SamplingTensors.build(list(params), list(keys), vocab, device)
        self.penalties = PenaltyState.build(histories, vocab, device) if self.tensors.any_penalties else None
        self.counters = torch.tensor(list(counters), dtype=torch.int64, device=device)
        # None when no row has min_tokens left to wait for: the steps then run exactly as without it.
        self.min_tokens = MinTokensMask.build(self.params, eos_ids, list(counters), vocab, device)
        self.token_hash = noise.on(device)
        S, k = len(params), min(self.tensors.logprobs_k, vocab)
        self.records: Records = {"ids": torch.empty((steps, S), dtype=torch.int32, device=device),
                                 "valid": torch.empty((steps, S), dtype=torch.bool, device=device)}
        if k >= 0:
            self.records["lp_chosen"] = torch.empty((steps, S), dtype=torch.float64, device=device)
            self.records["lp_top_values"] = torch.empty((steps, S, k), dtype=torch.float64, device=device)
            self.records["lp_top_ids"] = torch.empty((steps, S, k), dtype=torch.int64, device=device)
        fits = kernel is not None and vocab <= int(getattr(kernel, "SAMPLE_MAX_VOCAB", 0))
        self.kernel = kernel if fits and device.type == "cuda" else None
        self._fields: dict[str, int] = {}
        if self.kernel is not None:
            t = self.tensors
            self._fields = {"vocab": vocab, "greedy": t.greedy.data_ptr(), "temperature": t.temperature.data_ptr(),
                            "log_min_p": t.log_min_p.data_ptr(), "top_k": t.top_k.data_ptr(),
                            "top_p": t.top_p.data_ptr(), "repetition": t.repetition.data_ptr(),
                            "frequency": t.frequency.data_ptr(), "presence": t.presence.data_ptr(),
                            "keys": t.keys.data_ptr(), "counters": self.counters.data_ptr()}
            if self.penalties is not None:
                self._fields.update(counts=self.penalties.counts.data_ptr(), seen=self.penalties.seen.data_ptr())

    def step(self, logits: torch.Tensor, index: int, run_stop: int = 0) -> torch.Tensor:
        """Sample step `index` of the run from `logits`. `run_stop`: the device address of the run's stop state
        (csrc/interpreter/run_stop.cuh): the kernel does nothing once every row stopped at an earlier step."""
        return self.step_and_advance(logits, index, run_stop)[0]

    def step_and_advance(self, logits: torch.Tensor, index: int, run_stop: int = 0, advance: StepAdvance | None = None,
                         pdl: bool = False) -> tuple[torch.Tensor, bool]:
        """`step`, and whether the same launch also advanced `advance`'s step from the ids (only the kernel does;
        else the caller advances it). `pdl`: launch the kernel with programmatic dependent launch (after a kernel
        step that allows it: csrc/tk/grid_dependency.cuh)."""
        logits = logits[:, :self.token_hash.numel()]
        # What the rows draw from (stop ids masked below min_tokens; the counters are the device's own, so this is
        # one queued op with no host sync); logprobs still come from the raw `logits`.
        drawn = self.min_tokens.apply(logits, self.counters) if self._masks(index) else logits
        if self.kernel is not None and drawn.dtype == torch.float32 and drawn.stride(1) == 1:
            # A masking op sits between the model's step and this launch: no programmatic dependent launch after it.
            return (self._kernel_step(drawn, logits, index, run_stop, advance, pdl and drawn is logits),
                    advance is not None)
        try:
            ids, valid = sample_step(drawn, self.tensors, self.counters, self.penalties, self.token_hash)
        except Exception:  # noqa: BLE001 - find the row(s) to blame: each row alone
            ids, valid = self._row_by_row(drawn, index)
        if self.penalties is not None:
            self.penalties.record(ids)
        self.counters += 1
        rec = self.records
        rec["ids"][index] = ids
        rec["valid"][index] = valid
        if "lp_chosen" in rec:
            chosen, values, top_ids = step_logprobs(logits, ids, valid, rec["lp_top_ids"].shape[2])
            rec["lp_chosen"][index] = chosen
            rec["lp_top_values"][index] = values
            rec["lp_top_ids"][index] = top_ids
        return rec["ids"][index], False

    def _masks(self, index: int) -> bool:
        """Whether step `index` may mask a stop id: some row is still below its min_tokens there."""
        return self.min_tokens is not None and index < self.min_tokens.steps

    def _kernel_step(self, drawn: torch.Tensor, logits: torch.Tensor, index: int, run_stop: int,
                     advance: StepAdvance | None, pdl: bool) -> torch.Tensor:
        """The step in one launch of `sample_rows` from `drawn` (it records the ids, validity, penalties and counters
        itself, and advances `advance`'s step); logprobs from the raw `logits`."""
        rec = self.records
        ids = rec["ids"][index]
        extra: dict[str, int] = {"pdl": int(pdl)}
        if run_stop:
            extra.update(run_stop=run_stop, run_step=index)
        if advance is not None:
            extra.update(step_args=advance.step_args, step_error=advance.error)
        self.kernel.sample_rows(  # type: ignore[union-attr]
            {**self._fields, "logits": drawn.data_ptr(), "logits_stride": drawn.stride(0),
             "out_ids": ids.data_ptr(), "out_valid": rec["valid"][index].data_ptr(), **extra},
            ids.numel(), torch.cuda.current_stream(drawn.device).cuda_stream)
        if "lp_chosen" in rec:
            chosen, values, top_ids = step_logprobs(logits, ids.long(), rec["valid"][index], rec["lp_top_ids"].shape[2])
            rec["lp_chosen"][index] = chosen
            rec["lp_top_values"][index] = values
            rec["lp_top_ids"][index] = top_ids
        return ids

    def _row_by_row(self, logits: torch.Tensor, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The step sampled one row at a time: a row that fails is invalid, with its message in `failures`."""
        ids, valid = [], []
        for row, (p, key) in enumerate(zip(self.params, self.keys)):
            one = slice(row, row + 1)
            tensors = SamplingTensors.build([p], [key], self.token_hash.numel(), logits.device)
            penalties = (PenaltyState(self.penalties.seen[one], self.penalties.counts[one])
                         if self.penalties is not None else None)
            try:
                i, v = sample_step(logits[one], tensors, self.counters[one], penalties, self.token_hash)
            except Exception as exc:  # noqa: BLE001 - this row's own failure
                self.failures[(index, row)] = f"sampling failed: {type(exc).__name__}: {exc}"
                i, v = torch.zeros(1, dtype=torch.int64, device=logits.device), torch.zeros(
                    1, dtype=torch.bool, device=logits.device)
            ids.append(i)
            valid.append(v)
        return torch.cat(ids), torch.cat(valid)

    def chunk(self, begin: int, end: int) -> Records:
        """Steps [begin, end) of every record (device tensors; the caller copies them to the host)."""
        return {name: t[begin:end] for name, t in self.records.items()}
