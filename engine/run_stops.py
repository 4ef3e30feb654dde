"""The stop rules of a run of decode steps, as the device checks them (csrc/interpreter/run_stop.cuh): per row its
stop ids (EOS unless ignore_eos, then SamplingParams.stop_token_ids), its token budget (max_tokens and the context
limit) and the first token of the run its stop ids count from (min_tokens). Built on the host once per run and
copied to the device as a few int32 words; once every row has stopped there, the run's later launches do no work.

The host's own checks (engine/llm_engine.py: stop strings, EOS, stop ids, length) stay what decides which token
ends a request: the device rules are a subset of them, so the device never stops a row the host would go on with
(a row the host stops first, at a stop string, only runs on there until the run ends). Torch-free.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.sampling_params import SamplingParams

# The device layout (csrc/interpreter/run_stop.cuh): a header, then one record per row.
RS_STOPPED_AT, RS_RUNNING, RS_NUM_ROWS, RS_IDS_PER_ROW = 0, 1, 2, 3
RS_HEADER_WORDS = 4
RS_ROW_STOPPED, RS_ROW_GENERATED, RS_ROW_BUDGET, RS_ROW_MIN_COUNT = 0, 1, 2, 3
RS_ROW_WORDS = 4  # ... then the row's stop ids
INT32_MAX = 2**31 - 1
RS_NOT_STOPPED = INT32_MAX  # the run's RS_STOPPED_AT while a row runs
PAD_ID = -1  # pads a row's stop ids: never a token


@dataclass(frozen=True)
class RowStop:
    """One row's stop rule for a run. Tokens of the run are counted from 1."""

    stop_ids: tuple[int, ...]  # EOS (unless ignore_eos), then the request's stop ids; each once
    budget: int  # its length stop: the budget-th token of the run (>= 1)
    min_count: int  # a stop id ends it only from its min_count-th token of the run on (<= 1: from the first)

    def stops_at(self, n: int, token: int) -> bool:
        """Whether the row's n-th token of the run, `token`, stops it on the device (run_stop.cuh note_run_token)."""
        return n >= self.budget or (n >= self.min_count and token in self.stop_ids)


def row_stop(params: SamplingParams, eos_ids: Sequence[int], generated: int, length_left: int,
             min_tokens: int = 0) -> RowStop:
    """The rule of a request that has `generated` tokens before the run and may take `length_left` more before the
    context limit (max_seq_len - its tokens: the host's length stop counts both): it stops at the same token as
    the host's EOS / stop-id / length checks, and at a stop id only once it has `min_tokens` tokens in all."""
    ids = ([] if params.ignore_eos else list(eos_ids)) + list(params.stop_token_ids)
    # Every value is an int32 word on the device: an id past it is no token the model has, and a budget or a
    # minimum past it is never reached in a run.
    ids = [t for t in ids if t <= INT32_MAX]
    budget = max(1, min(params.max_tokens - generated, length_left, INT32_MAX))
    min_count = max(-INT32_MAX, min(min_tokens - generated, INT32_MAX))
    return RowStop(stop_ids=tuple(dict.fromkeys(ids)), budget=budget, min_count=min_count)


@dataclass(frozen=True)
class RunStops:
    """The stop rules of every row of a run, in batch order."""

    rows: tuple[RowStop, ...]

    @property
    def ids_per_row(self) -> int:
        """K: every row's stop ids padded to the longest (at least one word, so a row always has a record)."""
        return max([1, *(len(r.stop_ids) for r in self.rows)])

    def words(self, num_rows: int | None = None) -> list[int]:
        """The int32 words the device starts the run from: no row stopped, none generated. `num_rows` (>= the rules'
        rows): the run's rows when padded with dummy rows (engine/cuda/step_padding.py), which start stopped."""
        k, n = self.ids_per_row, len(self.rows) if num_rows is None else num_rows
        if n < len(self.rows):
            raise ValueError(f"RunStops.words: {n} rows for {len(self.rows)} rules")
        out = [0] * RS_HEADER_WORDS
        out[RS_STOPPED_AT], out[RS_RUNNING], out[RS_NUM_ROWS], out[RS_IDS_PER_ROW] = (
            RS_NOT_STOPPED, len(self.rows), n, k)
        for r in self.rows:
            record = [0] * RS_ROW_WORDS
            record[RS_ROW_BUDGET], record[RS_ROW_MIN_COUNT] = r.budget, r.min_count
            out += record + list(r.stop_ids) + [PAD_ID] * (k - len(r.stop_ids))
        for _ in range(n - len(self.rows)):
            record = [0] * RS_ROW_WORDS
            record[RS_ROW_STOPPED], record[RS_ROW_BUDGET] = 1, 1
            out += record + [PAD_ID] * k
        return out

    def stopped_at(self, steps: Sequence[Sequence[int]]) -> int | None:
        """The step (0-based) at which the device sees the last row stop, given each step's ids per row; None if a
        row is still running after the last one (the reference of what the device writes to RS_STOPPED_AT)."""
        running = set(range(len(self.rows)))
        for step, ids in enumerate(steps):
            running -= {row for row in running if self.rows[row].stops_at(step + 1, int(ids[row]))}
            if not running:
                return step
        return None


def worked_end(end: int, stopped_at: int) -> int:
    """Where the steps that did work end among a chunk of the run's steps ending at `end` (exclusive), given the
    run's RS_STOPPED_AT word as the chunk's last step left it: the launches after the step that stopped the last
    row did nothing, and what their records hold is no token."""
    return min(end, stopped_at + 1)


def run_stops(params: Sequence[SamplingParams], eos_ids: Sequence[int], generated: Sequence[int],
              length_left: Sequence[int], min_tokens: Sequence[int] | None = None) -> RunStops:
    """The rules of a run's rows (row_stop per row; min_tokens None: 0 for every row)."""
    mins = list(min_tokens) if min_tokens is not None else [0] * len(params)
    if not len(params) == len(generated) == len(length_left) == len(mins):
        raise ValueError(f"{len(params)} params vs {len(generated)} counts / {len(length_left)} length limits / "
                         f"{len(mins)} min_tokens")
    return RunStops(tuple(row_stop(p, eos_ids, g, n, m)
                          for p, g, n, m in zip(params, generated, length_left, mins)))
