"""Per-stream device state (program, counters, activations, status) and one step's launch.

A compiled stream (engine/scheduler/compiler/step_builder_cache.py) is reused for every step of a batch
shape; its counters are zeroed once and stay monotonic (the kernel gets `epoch`), so a step costs one
small step-args upload, one launch and one status download (error word + sampled ids together).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType

import numpy as np
import torch

from engine.cuda.activation_arena import ActivationArena
from engine.cuda.errors import MegakernelError, describe_failure, diagnose_root_cause
from engine.cuda.kernel_options import KernelOptions
from engine.instructions.layout import (SA_NUM_TOKENS, SA_OFF_TOKEN_IDS, STEP_ARGS_HEADER_WORDS, ModelDims,
                                        activation_specs)
from engine.scheduler.compiler.step_builder_cache import CompiledStream

KernelFields = dict[str, int | float | list[int]]  # Globals by member name (csrc/interpreter/globals.cuh)

COUNTER_HEADROOM = 1 << 30
PROGRESS_WORDS = 8  # csrc/interpreter/opcodes.cuh  # re-zero counters before epoch * period could overflow int32


@dataclass
class DeviceStream:
    compiled: CompiledStream
    program: torch.Tensor
    counter_period: torch.Tensor
    counters: torch.Tensor
    queue_head: torch.Tensor
    step_args: torch.Tensor
    acts: dict[str, torch.Tensor]
    status: torch.Tensor  # int32 [ERR_WORDS + S]: error record, then out_tokens
    grid: int
    queue_len: int
    dynamic: bool
    err_words: int
    max_period: int
    ring_pages: int  # weight-ring pages this stream runs with (engine/cuda/limits.py fit_stream)
    variant: int = 0  # the kernel variant it runs (engine/cuda/variant.py; 0: the general kernel)
    epoch: int = 0
    timeout_ns: int = 0  # the watchdog's limit for the step last prepared on it (engine/cuda/watchdog.py); 0: the default
    timing: torch.Tensor | None = None
    progress: torch.Tensor | None = None  # [grid, PROGRESS_WORDS]: post-mortem of a failed step
    _base_fields: KernelFields | None = field(default=None, repr=False)
    extra: dict[str, int] = field(default_factory=dict)
    tile_maps: torch.Tensor | None = None  # TILE_MATMUL's tensor maps (encode_tile_maps), where the stream has tiles

    @staticmethod
    def create(cs: CompiledStream, dims: ModelDims, device: torch.device, err_words: int,
               ring_pages: int, variant: int = 0, arena: ActivationArena | None = None) -> DeviceStream:
        """`arena`: the activations are views of its shared buffers (activation_arena.py), else the stream's own."""
        stream = cs.stream
        period = torch.as_tensor(stream.counter_period, dtype=torch.int32)
        acts: dict[str, torch.Tensor] = {}
        for spec in activation_specs(dims, cs.shape, stream.num_splits, stream.lm_blocks):
            if spec.name == "out_tokens":
                continue
            dtype = {"int32": torch.int32, "bfloat16": torch.bfloat16}.get(spec.dtype, torch.float32)
            t = (arena.view(spec.name, tuple(spec.shape), dtype) if arena is not None
                 else torch.empty(spec.shape, dtype=dtype, device=device))
            t.fill_(-7 if dtype == torch.int32 else float("nan"))  # poison: unwritten reads show up
            acts[spec.name] = t
        tensor = torch.from_numpy(np.ascontiguousarray(cs.tensor)).to(device)
        dynamic = cs.schedule.dynamic
        return DeviceStream(
            compiled=cs, program=tensor, counter_period=period.to(device),
            counters=torch.zeros(max(1, len(period)), dtype=torch.int32, device=device),
            queue_head=torch.zeros(1, dtype=torch.int32, device=device),
            step_args=cs.step_args.to(device), acts=acts,
            status=torch.zeros(err_words + cs.shape.num_seqs, dtype=torch.int32, device=device),
            grid=cs.schedule.num_sms, queue_len=int(tensor.shape[0] if dynamic else tensor.shape[1]),
            dynamic=dynamic, err_words=err_words, max_period=int(period.max().item()) if len(period) else 1,
            ring_pages=ring_pages, variant=variant)

    @property
    def out_tokens(self) -> torch.Tensor:
        return self.status[self.err_words:]

    def enable_timing(self, on: bool, words: int) -> None:
        """Allocate (or drop) the timing records: `words` int64 per instruction (the module's TIMING_WORDS)."""
        n = len(self.compiled.stream.instrs)
        self.timing = torch.zeros((n, words), dtype=torch.int64, device=self.status.device) if on else None

    def upload_step_args(self) -> None:
        if self._base_fields is not None and self._header() != self._base_fields["sa_header"]:
            raise MegakernelError("step-args header changed under a cached stream (the kernel takes it as a "
                                  "launch parameter built once per stream)")
        self.step_args.copy_(self.compiled.step_args, non_blocking=False)

    def feed_tokens(self, ids: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Token slots `dst` of the uploaded step args take `ids[src]` (device tensors), in stream order: a step
        launched before the host knew those tokens (engine/backends/step_feed.py)."""
        off = int(self.compiled.step_args[SA_OFF_TOKEN_IDS])
        self.step_args[off + dst] = ids[src].to(self.step_args.dtype)

    def embed_inputs(self, embed: torch.Tensor) -> None:
        """hidden = the embedding rows of the step's tokens, read from the device's step args (for a stream without
        EMBED: SplitParams.embed_in_stream)."""
        header = self.compiled.step_args[:STEP_ARGS_HEADER_WORDS]
        T, off = int(header[SA_NUM_TOKENS]), int(header[SA_OFF_TOKEN_IDS])
        ids = self.step_args[off:off + T].to(torch.int64)
        self.acts["hidden"][:T] = embed[ids].to(torch.float32)

    def _header(self) -> list[int]:
        """The step-args header (shape and section offsets): fixed for the stream's life."""
        return [int(v) for v in self.compiled.step_args[:STEP_ARGS_HEADER_WORDS].tolist()]

    def fields(self, weights: dict[str, torch.Tensor], k_cache: torch.Tensor, v_cache: torch.Tensor,
               dims: ModelDims, gu_tile: int, timeout_ns: int, kernel: KernelOptions) -> KernelFields:
        """The kernel's Globals by name. Everything but the epoch and the timing buffer is fixed for the
        stream's life, so it is built once, not on every launch."""
        if self._base_fields is None:
            if self.progress is None:
                self.progress = torch.zeros((self.grid, PROGRESS_WORDS), dtype=torch.int32,
                                            device=self.status.device)
            f: KernelFields = {name: t.data_ptr() for name, t in weights.items()}
            f.update({name: t.data_ptr() for name, t in self.acts.items()})
            f.update(k_cache=k_cache.data_ptr(), v_cache=v_cache.data_ptr(), out_tokens=self.out_tokens.data_ptr(),
                     counters=self.counters.data_ptr(), counter_period=self.counter_period.data_ptr(),
                     num_counters=int(self.counter_period.numel()),
                     queue_head=self.queue_head.data_ptr(), step_args=self.step_args.data_ptr(),
                     instructions=self.program.data_ptr(), error=self.status.data_ptr(),
                     progress=self.progress.data_ptr(), queue_len=self.queue_len, dynamic_queue=int(self.dynamic),
                     hidden_size=dims.hidden, intermediate=dims.intermediate, layers=dims.layers,
                     n_heads=dims.n_heads, n_kv=dims.n_kv, head_dim=dims.head_dim,
                     model_head_dim=dims.model_head_dim, vocab=dims.vocab,
                     kv_num_pages=int(k_cache.shape[1]), gu_tile=gu_tile,
                     lm_blocks=self.compiled.stream.lm_blocks, eps=float(dims.eps), timeout_ns=int(timeout_ns),
                     ring_pages=self.ring_pages, variant=self.variant, embed_next=0, **kernel.launch_fields(),
                     sa_header=self._header())
            if self.tile_maps is not None:
                f["tile_maps"] = self.tile_maps.data_ptr()
                if kernel.tile_inflight_pages is not None:
                    f["max_inflight_pages"] = kernel.tile_inflight_pages
            self._base_fields = f
        f = dict(self._base_fields)
        f["epoch"] = self.epoch
        if self.timing is not None:
            f["timing"] = self.timing.data_ptr()
        return f

    def before_launch(self) -> None:
        if (self.epoch + 1) * self.max_period >= COUNTER_HEADROOM:
            self.counters.zero_()
            self.queue_head.zero_()
            self.epoch = 0

    def after_launch(self) -> None:
        self.epoch += 1

    def check(self, status_host: torch.Tensor) -> None:
        if int(status_host[0]) != 0:
            period = self.counter_period.cpu().tolist()
            reached = [v - (self.epoch - 1) * p for v, p in zip(self.counters.cpu().tolist(), period)]
            root = diagnose_root_cause(self.program.cpu().numpy(), self.compiled.stream.counter_names, period,
                                       reached)
            message = (root + "\n" if root else "") + describe_failure(status_host[: self.err_words].tolist(),
                                                                          self.compiled)
            message += self._unfinished_counters()
            if self.dynamic:
                expected = self.epoch * (self.queue_len + self.grid)
                message += (f"\ndynamic queue head {int(self.queue_head.item())}, expected {expected} after "
                            f"{self.epoch} launches (N={self.queue_len}, grid={self.grid})")
            message += self._block_progress(int(status_host[9]) if int(status_host[8]) else -1)
            # The aborted step left counters mid-way: start this stream afresh so the next step runs.
            self.counters.zero_()
            self.queue_head.zero_()
            self.status.zero_()
            self.epoch = 0
            raise MegakernelError(message)

    def _block_progress(self, stuck_block: int) -> str:
        """Where the stuck block's roles were when the step failed."""
        if self.progress is None or not 0 <= stuck_block < self.grid:
            return ""
        p = self.progress[stuck_block].cpu().tolist()
        stage = {1: "waiting for dependencies", 2: "running", 3: "signalled"}.get(p[1], f"stage {p[1]}")
        return (f"\nblock {stuck_block}: consumers at instruction #{p[0]} ({stage}, ring position {p[2]}); "
                f"loader at instruction #{p[4]} (started at ring position {p[3]}, last page issued {p[5]})")

    def _unfinished_counters(self, limit: int = 8) -> str:
        """Counters the failed step left short of their per-step goal (the dependency picture)."""
        values = self.counters.cpu().tolist()
        period = self.counter_period.cpu().tolist()
        names = self.compiled.stream.counter_names
        short = [f"{names[c] if c < len(names) else c}: {values[c] - (self.epoch - 1) * period[c]}/{period[c]}"
                 for c in range(len(period)) if values[c] < self.epoch * period[c]]
        if not short:
            return ""
        more = f" (+{len(short) - limit} more)" if len(short) > limit else ""
        return "\nunfinished counters (reached/goal this step): " + ", ".join(short[:limit]) + more


def launch(module: ModuleType, ds: DeviceStream, fields: KernelFields) -> None:
    module.launch(fields, ds.grid, torch.cuda.current_stream().cuda_stream)
