"""The `cuda` backend: every step (decode and prefill chunks) is one launch of the persistent
megakernel over the same instruction tensors the VM runs. Greedy ids come back with the error word
in one small download; logits stay on the GPU for non-greedy sampling."""
from __future__ import annotations

import torch

from engine.backends.base import Backend
from engine.cuda.device_stream import DEFAULT_TIMEOUT_NS, DeviceStream, KernelFields, launch
from engine.cuda.limits import InterpreterLimits
from engine.cuda_build import load_extension
from engine.instructions.layout import ModelDims
from engine.instructions.opcodes import opcode_mask
from engine.instructions.packing import pack_weights
from engine.scheduler.step_builder_cache import BuildParams, CompiledStream, StreamCache
from engine.scheduler.step_builder_splits import SplitParams
from models.llama.kv_cache import PagedKVCache
from models.llama.step_batch import StepBatch
from models.llama.weights import LlamaWeights

# Larger `waves` cut ops into more, smaller instructions; tried in order until a stream fits the
# interpreter's buffers (only batches of several tokens need more than the first).
# Split-KV attention only once a split has >= 8 pages to read: below that the reduce hop costs more
# than the parallelism buys (docs/BENCHMARKS.md, knob sweep).
DEFAULT_MIN_PAGES_PER_SPLIT = 8
WAVES_LADDER = (1.0, 2.0, 4.0, 8.0, 16.0)  # multiples of the configured `waves`
# L2 prefetch knobs (csrc/interpreter/l2_prefetch.cuh): the controller pulls the first
# `l2_prefetch_kb` of each instruction it fetches, the loader the `l2_beyond_ring_kb` past the ring.
# Both measured slower on an H200 (1B decode: 1.39 -> 1.32 ms/token without the controller's 96 KiB,
# 1.30 -> 1.13 without the loader's 256 KiB; docs/BENCHMARKS.md): prefetches queue in front of the
# latency-bound loads of the critical path. Off by default, kept as knobs for other GPUs / models.
DEFAULT_L2_PREFETCH_KB = 0
DEFAULT_L2_BEYOND_RING_KB = 0
# Opcodes whose weights get the loader's prefetch past the ring: gate/up is the one the loader reaches
# while QKV, attention and O-proj (latency-bound, little streaming) run.
DEFAULT_L2_BEYOND_RING_OPS: tuple[str, ...] = ("RMS_GATE_UP_SILU",)
# Weight-page copies each SM's loader keeps in flight (0: as many as the ring holds). Past the
# bandwidth-delay product, more outstanding copies only lengthen the queues the critical path's reads wait
# in (1B decode on an H200, docs/BENCHMARKS.md: uncapped 1.007 -> 3: 0.973 ms/token; 4: 0.990, 6: 1.005).
# The best cap depends on the model: on the 1B shape 2 beats 3 by ~0.9 % (four A/Bs, fourth session), on
# the 8B shape 3 beats 2 by 3.5 % (4.618 vs 4.788; 4: 4.675). 3 is the default; the knob
# MEGAKERNEL_MAX_INFLIGHT_PAGES=2 gives the 1B its best number.
DEFAULT_MAX_INFLIGHT_PAGES = 3
DEFAULT_POLICY = "lpt"  # static queues: measured fastest (docs/BENCHMARKS.md)
# An op's last ring pages are freed after its release (csrc/interpreter/consumer.cuh): its release fence
# then does not wait behind new weight copies. 8 (one page per consumer warp) measured 1.051 against 1.099
# ms/token with 0 on an H100 (4 = 1.076; docs/BENCHMARKS.md, eighth session).
DEFAULT_DEFER_FREE_PAGES = 8
# While the consumers run QKV / attention / O-proj, the loader keeps at most this many copies in flight
# (the MLP's next pages): 1 measured best on the 1B shape (1.019 vs 1.030 ms/token at 2, 1.041 at 3 with
# the whole-step cap 2), 0.5 % behind 2 on the 8B shape (H100, eighth session).
DEFAULT_CHAIN_INFLIGHT_PAGES = 1
# ... and while gate/up, down and the LM head read their inputs (the copies the previous op's held pages let
# start otherwise slow that read): 1.011 vs 1.022 ms/token on the 1B shape, 5.576 vs 5.648 on the 8B (H100).
DEFAULT_LOW_CAP_INPUTS = True


class CudaBackend(Backend):
    name = "cuda"

    def __init__(self, weights: LlamaWeights, num_pages: int, page_size: int, policy: str = DEFAULT_POLICY,
                 num_sms: int | None = None, timeout_ns: int = DEFAULT_TIMEOUT_NS, waves: float = 1.0,
                 l2_prefetch_kb: int = DEFAULT_L2_PREFETCH_KB, l2_beyond_ring_kb: int = DEFAULT_L2_BEYOND_RING_KB,
                 l2_beyond_ring_ops: tuple[str, ...] = DEFAULT_L2_BEYOND_RING_OPS,
                 max_inflight_pages: int = DEFAULT_MAX_INFLIGHT_PAGES, max_ring_pages: int | None = None,
                 attn_kv_ring: bool = True, defer_free_pages: int = DEFAULT_DEFER_FREE_PAGES,
                 chain_inflight_pages: int = DEFAULT_CHAIN_INFLIGHT_PAGES, low_cap_inputs: bool = DEFAULT_LOW_CAP_INPUTS,
                 **split_kw: object) -> None:
        split_kw.setdefault("min_pages_per_split", DEFAULT_MIN_PAGES_PER_SPLIT)
        if not torch.cuda.is_available():
            raise RuntimeError("backend 'cuda' needs a CUDA GPU")
        self._device = torch.device("cuda", torch.cuda.current_device())
        self.module = load_extension("mk_interpreter")
        self.limits = InterpreterLimits.of(self.module)
        self.config = weights.config
        self.dims = ModelDims.from_config(self.config)
        self.limits.check_model(self.dims)
        self.max_tokens_per_step = self.limits.max_tokens(self.dims, split_kw.get("mlp_slices"))  # type: ignore[arg-type]
        self.num_sms = num_sms or torch.cuda.get_device_properties(self._device).multi_processor_count
        self.policy = policy
        self.timeout_ns = timeout_ns
        if not 0 <= l2_prefetch_kb <= 4096 or not 0 <= l2_beyond_ring_kb <= 4096:
            raise ValueError(f"l2_prefetch_kb / l2_beyond_ring_kb must be in [0, 4096], got "
                             f"{l2_prefetch_kb} / {l2_beyond_ring_kb}")
        self.l2_prefetch_bytes = l2_prefetch_kb * 1024
        self.l2_beyond_ring_bytes = l2_beyond_ring_kb * 1024
        self.l2_beyond_ring_ops = opcode_mask(l2_beyond_ring_ops)
        if max_inflight_pages < 0:
            raise ValueError(f"max_inflight_pages must be >= 0, got {max_inflight_pages}")
        self.max_inflight_pages = max_inflight_pages
        self.max_ring_pages = max_ring_pages  # None: as many as each stream's inputs leave room for
        # Decode attention streams its earlier keys through the page ring (csrc/interpreter/kv_stream.cuh).
        self.attn_kv_ring = attn_kv_ring
        if not 0 <= defer_free_pages <= 8:  # at most one page per consumer warp (consumer.cuh)
            raise ValueError(f"defer_free_pages must be in [0, 8], got {defer_free_pages}")
        self.defer_free_pages = defer_free_pages
        if chain_inflight_pages < 0:
            raise ValueError(f"chain_inflight_pages must be >= 0, got {chain_inflight_pages}")
        self.chain_inflight_pages = chain_inflight_pages  # 0: max_inflight_pages throughout
        self.low_cap_inputs = low_cap_inputs  # the low cap also while an MLP op reads its input
        self.weights = {k: v.to(self._device) for k, v in pack_weights(weights, torch.bfloat16).items()}
        self.kv = PagedKVCache.allocate(self.config, num_pages=num_pages, page_size=page_size,
                                        dtype=torch.bfloat16, device=self._device)
        self.page_size = page_size
        self._split_kw = split_kw
        self._caches = [StreamCache(self.dims, page_size, BuildParams(
            policy, SplitParams(num_sms=self.num_sms, waves=waves * w, **split_kw),  # type: ignore[arg-type]
            BuildParams.for_sms(self.num_sms).cost)) for w in WAVES_LADDER]
        self.timing = False
        self.last: DeviceStream | None = None

    @property
    def device(self) -> torch.device:
        return self._device

    def launch_fields(self, ds: DeviceStream) -> KernelFields:
        return ds.fields(self.weights, self.kv.k, self.kv.v, self.dims, self.dims.gu_tile, self.timeout_ns,
                         self.l2_prefetch_bytes, self.l2_beyond_ring_bytes, self.l2_beyond_ring_ops,
                         self.max_inflight_pages, self.attn_kv_ring,
                         self.defer_free_pages, self.chain_inflight_pages,
                         self.low_cap_inputs)

    def _compiled(self, batch: StepBatch) -> CompiledStream:
        last_error: Exception | None = None
        for cache in self._caches:
            cs = cache.get(batch)
            if cs.backend_state is False:  # checked before: does not fit at this granularity
                continue
            if cs.backend_state is None:
                try:
                    ring_pages = self.limits.fit_stream(cs.words, batch.num_tokens, batch.num_seqs, self.dims,
                                                        self.max_ring_pages)
                except ValueError as exc:
                    last_error = exc
                    cs.backend_state = False
                    continue
                cs.backend_state = DeviceStream.create(cs, self.dims, self._device, self.module.ERR_WORDS,
                                                       ring_pages)
            return cs
        raise ValueError(f"this step (T={batch.num_tokens}, S={batch.num_seqs}) does not fit the megakernel"
                         + (f": {last_error}" if last_error else ""))

    def run(self, batch: StepBatch) -> DeviceStream:
        """Launch one step; returns the stream state whose buffers hold logits and out_tokens."""
        if batch.num_tokens > self.max_tokens_per_step:
            raise ValueError(f"step of {batch.num_tokens} tokens exceeds the megakernel's "
                             f"{self.max_tokens_per_step} tokens per step (the engine caps its token budget)")
        cs = self._compiled(batch)
        ds: DeviceStream = cs.backend_state  # type: ignore[assignment]
        if (ds.timing is not None) != self.timing:
            ds.enable_timing(self.timing, self.module.TIMING_WORDS)
        ds.upload_step_args()
        ds.before_launch()
        launch(self.module, ds, self.launch_fields(ds))
        ds.after_launch()
        self.last = ds
        return ds

    def _finish(self, ds: DeviceStream) -> torch.Tensor:
        status = ds.status.cpu()  # synchronises; error record and sampled ids in one copy
        ds.check(status)
        return status[ds.err_words:].to(torch.int64)

    @torch.inference_mode()
    def forward(self, batch: StepBatch) -> torch.Tensor:
        ds = self.run(batch)
        self._finish(ds)
        return ds.acts["logits"].clone()

    @torch.inference_mode()
    def greedy(self, batch: StepBatch) -> torch.Tensor:
        return self._finish(self.run(batch))

    def prefill(self, tokens: list[int], block_table: list[int], start: int = 0) -> int:
        """Run one sequence's tokens through the kernel in chunks it can hold; returns the last
        chunk's greedy id (benchmarks and profiles; the engine's scheduler chunks by itself)."""
        last = -1
        for begin in range(0, len(tokens), self.max_tokens_per_step):
            chunk = tokens[begin:begin + self.max_tokens_per_step]
            batch = StepBatch.build([chunk], [start + begin], [block_table], device=self._device,
                                    page_size=self.page_size)
            last = int(self.greedy(batch)[0])
        return last
