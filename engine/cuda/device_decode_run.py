"""A run of decode steps queued back to back on the GPU (CudaBackend.decode_steps): the launches, the chunked
readback of their records and the hand-over of the steps that did work, with the host never waiting between two
steps.

Greedy: each step's ARGMAX_REDUCE writes its ids to a history row and advances the step args in place
(csrc/interpreter/advance.cuh). Sampled: the sampler's kernel draws from the step's logits and advances the step args
from its ids in the same launch (where the sampler runs torch ops instead, a one-block kernel advances them). Records
come back in chunks of READBACK_STEPS steps (after the error word, so nothing of a failed step is handed out) while
later steps run, and the host stays at most LOOKAHEAD_CHUNKS chunks behind, so a stop it sees ends the run within
that many chunks. With a stop state the device also checks each step's ids against the rows' stop rules
(csrc/interpreter/run_stop.cuh): once every row stopped, the queued steps after it do no work, and their records
(not tokens) are never handed over. The planned last step does not advance: its next position may have no page.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol

import torch

from engine.cuda.device_stream import DeviceStream
from engine.cuda.run_timer import RunTimer
from engine.run_stops import RS_NOT_STOPPED, RS_STOPPED_AT, worked_end
from engine.sampling.run_sampler import Records, RunSampler, StepAdvance

# A run of on-device decode steps hands its ids back every this many steps: the host detokenises and checks
# stops for them while later steps run, and at the run's end only this many are left to process.
READBACK_STEPS = 4
# ... and keeps at most this many chunks queued ahead of the host: a stop (EOS, a stop string, a request waiting
# for a seat) ends the run at most this many chunks later, and the GPU still never waits for the host.
LOOKAHEAD_CHUNKS = 2


class Launch(Protocol):
    """CudaBackend._launch: one launch of the stream, optionally advancing it and checking the run's stop state."""

    def __call__(self, ds: DeviceStream, advance_history: int = 0, run_stop: int = 0, run_step: int = 0) -> None: ...


class AdvanceKernel(Protocol):
    """The interpreter module's one-block kernel that advances the step args from sampled ids (`module.advance`)."""

    def __call__(self, step_args: int, ids: int, history: int, step: int, status: int, rows: int, stream: int,
                 run_stop: int = 0) -> None: ...


def run_decode_steps(ds: DeviceStream, seqs: int, rows: int, steps: int, on_records: Callable[[Records], bool],
                     sampler: RunSampler | None, state: torch.Tensor | None, device: torch.device, launch: Launch,
                     finish: Callable[[DeviceStream], torch.Tensor], advance_kernel: AdvanceKernel,
                     pdl: bool, timer: RunTimer) -> int:
    """`steps` decode steps of the prepared stream `ds`, whose `rows` rows are `seqs` sequences, then any dummy rows
    of a padded run; `state`: the run's stop state on the device (engine/run_stops.py), or None. Hands each chunk
    of records to `on_records` (ids of the real rows only) until it returns False or the run is over; returns how
    many steps did work. `timer` adds the run's device time and the device's waits for the host to its totals (its
    chunks' events are the ones the host waits on anyway)."""
    records = sampler.records if sampler is not None else {
        "ids": torch.empty((steps, rows), dtype=torch.int32, device=device)}
    host = {name: torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for name, t in records.items()}
    chunks = -(-steps // READBACK_STEPS)
    errors = torch.empty((chunks, 1), dtype=torch.int32, pin_memory=True)
    # Per chunk, the run's RS_STOPPED_AT word as the chunk's last step left it: the steps after that one did no work.
    run_stop = state.data_ptr() if state is not None else 0
    stopped_at = torch.full((chunks, 1), RS_NOT_STOPPED, dtype=torch.int32, pin_memory=True)
    pending: deque[tuple[int, int, int, torch.cuda.Event]] = deque()
    stream = torch.cuda.current_stream(device).cuda_stream
    launched, begin, ran, go_on = 0, 0, 0, True
    history: torch.Tensor | None = None

    def read_back() -> None:
        """Queue the copy of steps [begin, launched), the error word and the run's stop word to the host."""
        nonlocal begin
        for name, t in records.items():
            host[name][begin:launched].copy_(t[begin:launched], non_blocking=True)
        index = (launched - 1) // READBACK_STEPS
        errors[index].copy_(ds.status[:1], non_blocking=True)
        if state is not None:
            stopped_at[index].copy_(state[RS_STOPPED_AT:RS_STOPPED_AT + 1], non_blocking=True)
        event = timer.chunk_end()
        pending.append((begin, launched, index, event))
        begin = launched

    def deliver() -> bool:
        """Hand over the oldest chunk's steps that did work; False once the run is over (the host stopped, or
        the device saw every row stop)."""
        nonlocal ran
        first, end, index, event = pending.popleft()
        event.synchronize()
        timer.chunk_done(event)
        if int(errors[index, 0]) != 0:
            finish(ds)  # raises, naming the instruction
        worked = worked_end(end, int(stopped_at[index, 0]))
        if worked <= first:
            return False
        ran = worked
        chunk = {name: t[first:worked] for name, t in host.items()}
        chunk["ids"] = chunk["ids"][:, :seqs].to(torch.int64)
        return on_records(chunk) and worked == end

    timer.start_run()
    while launched < steps and go_on:
        last = launched == steps - 1
        if launched % READBACK_STEPS == 0:
            timer.chunk_started()
        ids = records["ids"][launched]
        if sampler is None:
            launch(ds, advance_history=0 if last else ids.data_ptr(), run_stop=run_stop, run_step=launched)
            if last:
                ids.copy_(ds.out_tokens)
        else:
            launch(ds, run_stop=run_stop, run_step=launched)
            advance = None if last else StepAdvance(ds.step_args.data_ptr(), ds.status.data_ptr())
            _ids, advanced = sampler.step_and_advance(ds.acts["logits"][:seqs], launched, run_stop, advance, pdl=pdl)
            if advance is not None and not advanced:  # sampled by torch ops: the advance kernel feeds them back
                if history is None:  # the kernel's history rows are the padded step's (rows, not seqs)
                    history = torch.empty((steps, rows), dtype=torch.int32, device=device)
                advance_kernel(ds.step_args.data_ptr(), ids.data_ptr(), history.data_ptr(), launched,
                               ds.status.data_ptr(), seqs, stream, run_stop=run_stop)
        launched += 1
        if launched % READBACK_STEPS == 0 or launched == steps:
            read_back()
            while go_on and pending and (len(pending) > LOOKAHEAD_CHUNKS or pending[0][3].query()):
                go_on = deliver()
    if begin < launched:  # ended early between two readbacks: the steps since the last one
        read_back()
    while pending:  # what was queued still ran: hand over what did work
        deliver()
    timer.end_run()
    finish(ds)  # the error word of the last step
    return ran
