"""The `vm` backend: every step runs the exact instruction tensors the CUDA interpreter would run,
opcode by opcode on the CPU (engine/vm), with deadlock and (optionally) race detection."""
from __future__ import annotations

import torch

from engine.backends.base import Backend
from engine.instructions.layout import ModelDims
from engine.instructions.packing import pack_weights
from engine.instructions.step_args import StepArgsView
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
                 **split_kw: object) -> None:
        """num_sms: the SMs the VM simulates (the streams are compiled for them); weight_dtype: packed-weight
        and KV dtype (default: the checkpoint's dtype); kv_dtype: the KV cache's, where it differs (float8_e4m3fn:
        fp8 pages); math is fp32. The rest are SplitParams fields."""
        self.config = weights.config
        self.dims = ModelDims.from_config(self.config)
        dtype = weight_dtype or weights.dtype
        self.packed = pack_weights(weights, dtype)
        kv_dtype = kv_dtype or dtype
        self.kv = PagedKVCache.allocate(self.config, num_pages=num_pages, page_size=page_size, dtype=kv_dtype,
                                        head_dim=self.dims.head_dim,  # stored heads (head_padding.py)
                                        scales=kv_scales(weights) if kv_dtype == FP8_KV else None)
        self.target = TargetDevice(num_sms=num_sms)
        self.params = BuildParams.of(policy, **split_kw)
        self.cache = StreamCache(self.dims, page_size, self.params, self.target)
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

    def _forward(self, batch: StepBatch) -> torch.Tensor:
        cs = self.cache.get(batch)
        bufs, sync = self._buffers(cs)
        bufs.args = StepArgsView.decode(cs.step_args)
        if not self.params.split.embed_in_stream:  # no EMBED in the stream: its input, as the cuda backend writes it
            T = bufs.args.num_tokens
            bufs.get("hidden")[:T] = bufs.w("embed")[bufs.args.token_ids[:T]].to(torch.float32)
        vm = VM(bufs, seed=self.vm_seed + self.steps, check_races=self.check_races)
        if cs.schedule.dynamic:
            self.last_trace = vm.run_dynamic(cs.tensor, cs.schedule.num_sms, sync)
        else:
            self.last_trace = vm.run_static(cs.tensor, sync)
        self.steps += 1
        self.last_stream = cs
        self._last_tokens = bufs.get("out_tokens").to(torch.int64).clone()
        return bufs.get("logits").clone()

    @property
    def last_tokens(self) -> torch.Tensor:
        """int64 [S] token ids the last step's ARGMAX_REDUCE wrote."""
        if self._last_tokens is None:
            raise RuntimeError("VMBackend.last_tokens: no step has run yet")
        return self._last_tokens

    def stream_stats(self) -> StreamStats:
        return self.cache.stats()

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

