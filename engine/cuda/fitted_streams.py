"""The cuda backend's compiled streams, each fitted to the kernel once: a step's instruction stream is compiled at the
first granularity of WAVES_LADDER whose stream fits the interpreter's buffers (engine/cuda/limits.py fit_stream), and
gets its device state (engine/cuda/device_stream.py: activations in one shared arena, the ring size, the kernel
variant, the tile maps). A step whose shape is not compiled yet may run padded in a compiled larger one
(stream_hosting.py). Apart from the launches (engine/backends/cuda_backend.py), so the fitting runs on the CPU in
tests (tests/engine/test_fitted_streams.py)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from types import ModuleType

import torch

from engine.cuda.activation_arena import ActivationArena
from engine.cuda.device_stream import DeviceStream
from engine.cuda.kernel_options import KernelOptions
from engine.cuda.limits import InterpreterLimits
from engine.cuda.stream_hosting import StreamHosting
from engine.cuda.tensor_maps import tile_maps
from engine.cuda.variant import kernel_variant
from engine.cuda_build import cache_root
from engine.instructions.layout import ModelDims
from engine.scheduler.compiler.split_params import SplitParams
from engine.scheduler.compiler.step_builder_cache import BuildParams, CompiledStream, StreamCache, StreamStats
from engine.scheduler.compiler.stream_store import StreamStore
from engine.scheduler.compiler.target import TargetDevice
from models.llama.step_batch import StepBatch

# Larger `waves` cut ops into more, smaller instructions; tried in order until a stream fits the
# interpreter's buffers (only batches of several tokens need more than the first).
WAVES_LADDER = (1.0, 2.0, 4.0, 8.0, 16.0)  # multiples of the configured `waves`

# Compiled streams kept per cache: the warm-up compiles ~40 shapes (engine/warm_up.py) and a server meets a few more;
# their activations share one arena (activation_arena.py), so a kept stream costs its program (0.5-20 MB) only.
STREAM_CACHE_CAPACITY = 96


@dataclass(frozen=True)
class StreamFit:
    """What fitting a compiled stream to the kernel reads: the model, the kernel's options and limits, the token
    group and whether several x rows are bf16 (fill_split_defaults), and whether W_o's panel map is passed."""
    dims: ModelDims
    page_size: int
    kernel: KernelOptions
    limits: InterpreterLimits
    token_group: int
    bf16_rows: bool
    w_o_panels: bool
    lm_head_direct_max_seqs: int = 0


class FittedStreams:
    def __init__(self, module: ModuleType, weights: dict[str, torch.Tensor], fit: StreamFit,
                 device: torch.device, num_sms: int, policy: str, waves: float, split_kw: dict[str, object],
                 stored: bool, hosting: StreamHosting | None = None, argmax_rank: int | None = None) -> None:
        """`weights`: the kernel's weight buffers (the tile maps point into them); `split_kw`: SplitParams keywords;
        `stored`: compiled streams are kept on disk (stream_store.py); `argmax_rank`: a tensor-parallel rank whose
        streams for steps nobody reads logits of compute its share of the LM head (KernelOptions.tp_vocab_argmax)."""
        self.module, self.weights, self.fit, self.device = module, weights, fit, device
        self.hosting = hosting
        target = TargetDevice(num_sms=num_sms)
        params = [BuildParams(policy, SplitParams(waves=waves * w, **split_kw)) for w in WAVES_LADDER]  # type: ignore
        self.caches = [self._cache(p, target, stored) for p in params]
        self.argmax_caches = self.caches
        if argmax_rank is not None:
            self.argmax_caches = [self._cache(replace(p, split=replace(p.split, tp_vocab_rank=argmax_rank)), target,
                                              stored) for p in params]
        self.arena = ActivationArena(device)  # the streams' activations, shared

    def _cache(self, params: BuildParams, target: TargetDevice, stored: bool) -> StreamCache:
        d, ps = self.fit.dims, self.fit.page_size
        store = StreamStore(cache_root() / "streams", d, ps, params, target) if stored else None
        return StreamCache(d, ps, params, target, capacity=STREAM_CACHE_CAPACITY, store=store)

    def stats(self) -> StreamStats:
        caches = self.caches + (self.argmax_caches if self.argmax_caches is not self.caches else [])
        return sum((c.stats() for c in caches), StreamStats())

    def compiled(self, batch: StepBatch, step: StepBatch | None = None,
                 argmax_only: bool = False) -> tuple[CompiledStream, StepBatch]:
        """The stream `batch` runs in, and `batch` as it runs there: `step` (the step before padding, where it may
        be hosted) padded into a fitted stream of a larger shape while `batch`'s own is not compiled
        (stream_hosting.py), else `batch` in its own shape's stream, compiled now if it is not. `argmax_only`: no
        logits are read (a tensor-parallel rank's stream then computes its share of them)."""
        last_error: Exception | None = None
        for cache in self.argmax_caches if argmax_only else self.caches:
            key = cache.key(batch)
            if step is not None and self.hosting is not None:
                hosted = self.hosting.place(cache, key, step, batch,
                                            lambda c: isinstance(c.backend_state, DeviceStream))
                if hosted is not None:
                    return hosted
            cs = cache.get(batch, key)
            if cs.backend_state is False:  # checked before: does not fit at this granularity
                continue
            if cs.backend_state is None:
                try:
                    cs.backend_state = self._device_stream(cs, batch)
                except ValueError as exc:
                    last_error = exc
                    cs.backend_state = False
                    continue
            return cs, batch
        raise ValueError(f"this step (T={batch.num_tokens}, S={batch.num_seqs}) does not fit the megakernel"
                         + (f": {last_error}" if last_error else ""))

    def _device_stream(self, cs: CompiledStream, batch: StepBatch) -> DeviceStream:
        """`cs` fitted to the kernel (ValueError: it does not fit) with its device state."""
        f, lim = self.fit, self.fit.limits
        # x of one row is 2-byte for the tensor cores, bf16 or (fp8 streams) f16; several rows bf16 only where the
        # streams are bf16
        bf16_x = f.bf16_rows or (f.kernel.mma_matvec and batch.num_tokens == 1)
        ring_pages = lim.fit_stream(cs.words, batch.num_tokens, batch.num_seqs, f.dims, f.kernel.max_ring_pages,
                                    bf16_x, f.kernel.attn_tiles, f.token_group, f.lm_head_direct_max_seqs,
                                    f.kernel.tile_small_x)
        rows = lim.matvec_row_elems(cs.words, f.dims, f.w_o_panels)
        tiles = cs.stream.plan.tiles
        variant = kernel_variant(cs.shape, f.dims, f.page_size, cs.stream.plan.fused, f.kernel, lim.page_bytes,
                                 all(lim.row_takes_mma(k) for k in rows), tiles is not None and tiles.tall)
        ds = DeviceStream.create(cs, f.dims, self.device, self.module.ERR_WORDS, ring_pages, variant, self.arena)
        if cs.stream.plan.tiles is not None:
            ds.tile_maps = tile_maps(self.module, self.weights, ds.acts, f.dims)
        return ds
