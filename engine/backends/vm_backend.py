"""The `vm` backend: every step runs the exact instruction tensors the CUDA interpreter would run,
opcode by opcode on the CPU (engine/vm), with deadlock and (optionally) race detection."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import torch

from engine.backends.base import Backend
from engine.cuda.step_padding import pad_batch
from engine.cuda.stream_hosting import StreamHosting, may_host
from engine.instructions.layout import ModelDims
from engine.instructions.packing import pack_weights
from engine.instructions.step_args import StepArgsView
from engine.instructions.tp_exchange import TpExchange
from engine.scheduler.compiler.step_builder_cache import BuildParams, CompiledStream, StreamCache, StreamStats
from engine.scheduler.compiler.target import DEFAULT_SIMULATED_SMS, TargetDevice
from engine.vm.buffers import GlobalBuffers
from engine.vm.machine import VM, StepTrace, SyncState
from models.llama.kv_cache import FP8_KV, PagedKVCache
from models.llama.kv_scales import kv_scales
from models.llama.step_batch import StepBatch
from models.llama.weights import LlamaWeights


class VMBackend(Backend):
    name = "vm"

    def __init__(self, weights: LlamaWeights, num_pages: int, page_size: int,
                 num_sms: int = DEFAULT_SIMULATED_SMS, policy: str = "rr", seed: int = 0, check_races: bool = True,
                 weight_dtype: torch.dtype | None = None, kv_dtype: torch.dtype | None = None,
                 pad_over: int | None = None, tp_world: int = 1, tp_rank: int = 0, **split_kw: object) -> None:
        """num_sms: the SMs the VM simulates (the streams are compiled for them); weight_dtype: packed-weight
        and KV dtype (default: the checkpoint's dtype); kv_dtype: the KV cache's, where it differs (float8_e4m3fn:
        fp8 pages); math is fp32; pad_over: steps of more tokens than this run as the cuda backend runs them, padded
        to a bucketed shape or hosted in a compiled larger stream (engine/cuda/stream_hosting.py), their dummy
        sequences on a spare KV page past `num_pages` (None: every step in its own shape's stream); tp_world: the
        ranks of the tensor-parallel group this is rank `tp_rank` of (`weights` its megakernel shard; the group,
        engine/backends/vm_tensor_parallel.py, sets `tp_exchange` and runs the steps; its argmax-only steps compute
        this rank's share of the LM head, SplitParams.tp_vocab_rank). The rest are SplitParams fields."""
        self.config = weights.config
        self.dims = replace(ModelDims.from_config(self.config), tp_world=tp_world)
        self.tp_exchange: TpExchange | None = None
        dtype = weight_dtype or weights.dtype
        self.packed = pack_weights(weights, dtype)
        kv_dtype = kv_dtype or dtype
        self.pad_over = pad_over
        self.hosting = StreamHosting(num_pages) if pad_over is not None else None
        self.kv = PagedKVCache.allocate(self.config, num_pages=num_pages + (pad_over is not None),
                                        page_size=page_size, dtype=kv_dtype,
                                        head_dim=self.dims.head_dim,  # stored heads (head_padding.py)
                                        scales=kv_scales(weights) if kv_dtype == FP8_KV else None)
        self.target = TargetDevice(num_sms=num_sms)
        self.params = BuildParams.of(policy, **split_kw)
        self.cache = StreamCache(self.dims, page_size, self.params, self.target)
        # A tensor-parallel rank's streams for steps whose logits nobody reads (greedy): a share of the LM head
        self.argmax_cache = (StreamCache(self.dims, page_size, BuildParams.of(policy, **{**split_kw,
                                                                                     "tp_vocab_rank": tp_rank}),
                                         self.target) if tp_world > 1 else self.cache)
        self.vm_seed = seed
        self.check_races = check_races
        self.steps = 0
        self.last_stream: CompiledStream | None = None
        self.last_trace: StepTrace | None = None
        self._last_tokens: torch.Tensor | None = None

    def _buffers(self, cs: CompiledStream) -> tuple[GlobalBuffers, SyncState]:
        if cs.backend_state is None:  # counters are per stream: zeroed once, monotonic afterwards
            bufs = GlobalBuffers.allocate(self.dims, self.packed, self.kv.k, self.kv.v, cs.shape,
                                          cs.stream.num_splits, cs.stream.lm_blocks, seed=self.vm_seed,
                                          kv_scales=(self.kv.k_scale, self.kv.v_scale)
                                          if self.kv.k_scale is not None and self.kv.v_scale is not None else None)
            bufs.tp = self.tp_exchange
            cs.backend_state = (bufs, SyncState.fresh(cs.stream.counter_period))
        return cs.backend_state  # type: ignore[return-value]

    @torch.inference_mode()
    def forward(self, batch: StepBatch) -> torch.Tensor:
        # Each opcode is a handful of tiny tensor ops: intra-op threads only add contention.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._forward(batch)
        finally:
            torch.set_num_threads(threads)

    def _placed(self, batch: StepBatch, argmax_only: bool = False) -> tuple[CompiledStream, StepBatch]:
        """The stream `batch` runs in and `batch` as it runs there (padded, where pad_over says)."""
        if argmax_only and self.argmax_cache is not self.cache:  # a tensor-parallel rank: no hosting there
            # (engine/backends/vm_tensor_parallel.py)
            return self.argmax_cache.get(batch), batch
        if self.hosting is None or self.pad_over is None:
            return self.cache.get(batch), batch
        # as the cuda backend: steps of more tokens padded, and those may_host hosted
        pads = batch.num_tokens > self.pad_over
        if not may_host(batch, pads):
            return self.cache.get(batch), batch
        padded = pad_batch(batch, self.hosting.spare_page) if pads else batch
        key = self.cache.key(padded)
        hosted = self.hosting.place(self.cache, key, batch, padded, lambda cs: True)
        return hosted if hosted is not None else (self.cache.get(padded, key), padded)

    def _forward(self, batch: StepBatch) -> torch.Tensor:
        cs, bufs, sync = self.prepare(batch)
        vm = self.machine(bufs)
        if cs.schedule.dynamic:
            trace = vm.run_dynamic(cs.tensor, cs.schedule.num_sms, sync)
        else:
            trace = vm.run_static(cs.tensor, sync)
        return self.finish(batch, cs, bufs, trace)

    def prepare(self, batch: StepBatch, argmax_only: bool = False) -> tuple[CompiledStream, GlobalBuffers, SyncState]:
        """The stream `batch` runs in, its buffers with the step's args (and input rows, without EMBED) and counters;
        `argmax_only`: a step whose logits are not read (a tensor-parallel rank then computes its share of them)."""
        cs, _ = self._placed(batch, argmax_only)
        bufs, sync = self._buffers(cs)
        bufs.args = StepArgsView.decode(cs.step_args)
        if not self.params.split.embed_in_stream:  # no EMBED in the stream: its input, as the cuda backend writes it
            T = bufs.args.num_tokens
            bufs.get("hidden")[:T] = bufs.w("embed")[bufs.args.token_ids[:T]].to(torch.float32)
        return cs, bufs, sync

    def machine(self, bufs: GlobalBuffers) -> VM:
        """The VM of this backend's next step (its interleaving seeded by the step's number)."""
        return VM(bufs, seed=self.vm_seed + self.steps, check_races=self.check_races)

    def finish(self, batch: StepBatch, cs: CompiledStream, bufs: GlobalBuffers, trace: StepTrace) -> torch.Tensor:
        """The step's logits (its ids in last_tokens), once the VM ran it."""
        self.last_trace = trace
        self.steps += 1
        self.last_stream = cs
        S = batch.num_seqs  # the rows of dummy sequences dropped
        self._last_tokens = bufs.get("out_tokens")[:S].to(torch.int64).clone()
        return bufs.get("logits")[:S].clone()

    @property
    def last_tokens(self) -> torch.Tensor:
        """int64 [S] token ids the last step's ARGMAX_REDUCE wrote."""
        if self._last_tokens is None:
            raise RuntimeError("VMBackend.last_tokens: no step has run yet")
        return self._last_tokens

    def stream_stats(self) -> StreamStats:
        return self.cache.stats()

    @contextmanager
    def warming_up(self, max_tokens: int, max_seqs: int, max_table_pages: int) -> Iterator[None]:
        """As the cuda backend's, where pad_over is set (Backend.warming_up)."""
        if self.hosting is None:
            yield
            return
        with self.hosting.warming_up(self.forward, max_tokens, max_seqs, max_table_pages):
            yield

    def greedy(self, batch: StepBatch) -> torch.Tensor:
        """Token ids from the in-stream ARGMAX_REDUCE (what the GPU hands back), int64 [S]."""
        self.forward(batch)
        return self.last_tokens

    @property
    def last_profile(self):  # noqa: ANN201 (profiler.record.ProfileRecord)
        """Cost-model timeline of the last step's schedule as a simulated ProfileRecord."""
        from engine.simulated_profile import record_from_compiled
        if self.last_stream is None:
            raise RuntimeError("VMBackend.last_profile: no step has run yet")
        return record_from_compiled(self.last_stream, {"backend": "vm", "policy": self.params.policy,
                                                       "num_sms": self.target.num_sms})

