"""The `cuda` backend: every step (decode and prefill chunks) is one launch of the persistent
megakernel over the same instruction tensors the VM runs. Greedy ids come back with the error word
in one small download; logits stay on the GPU for non-greedy sampling."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import torch

from engine.backends.base import Backend, OnRecords
from engine.backends.step_feed import StepHandle, TokenFeed
from engine.cuda.device_decode_run import run_decode_steps
from engine.cuda.device_stream import DeviceStream, KernelFields, launch
from engine.cuda.run_timer import RunTimer
from engine.backends.cuda_launched_step import LaunchedStep
from engine.cuda.watchdog import DEFAULT_TIMEOUT_NS, attention_products, step_timeout_ns
from engine.cuda.device_tuning import device_tuning, peak_memory_gbps
from engine.cuda.fitted_streams import FittedStreams, StreamFit
from engine.cuda.fp8_weights import STREAMED_MATRICES, check_fp8_dims, is_fp8, kernel_weight_buffers
from engine.cuda.kernel_options import KernelOptions
from engine.cuda.limits import InterpreterLimits
from engine.cuda.split_defaults import fill_split_defaults
from engine.cuda.step_padding import pad_batch, padded_budget
from engine.cuda.background_builds import BackgroundBuilds
from engine.cuda.stream_hosting import StreamHosting, may_host
from engine.cuda.tensor_maps import w_o_map
from engine.cuda.tp_peers import TpPeers
from engine.cuda_build import load_extension
from engine.engine_config import DEFAULT_POLICY
from engine.instructions.layout import ModelDims
from engine.instructions.packing import pack_weights
from engine.run_stops import RunStops
from engine.run_times import RunTimes
from engine.sampling.run_sampler import RunSampler
from engine.scheduler.compiler.split_params import SplitParams
from engine.scheduler.compiler.step_builder_cache import StreamStats
from models.llama.config import LlamaConfig
from models.llama.kv_cache import PagedKVCache
from models.llama.step_batch import StepBatch
from models.llama.weights import LlamaWeights

# Split-KV attention only once a split has >= 8 pages to read: below that the reduce hop costs more
# than the parallelism buys (a sweep of min_pages_per_split on the GPU).
DEFAULT_MIN_PAGES_PER_SPLIT = 8

def check_model_shape(config: LlamaConfig) -> None:
    """Raises UnsupportedOnGPU (one line naming the field) for a model shape the megakernel cannot run: from the
    config alone, so the engine refuses it before the weights load."""
    InterpreterLimits.of(load_extension("mk_interpreter")).check_model(ModelDims.from_config(config))


class CudaBackend(Backend):
    name = "cuda"

    def __init__(self, weights: LlamaWeights, num_pages: int, page_size: int, policy: str = DEFAULT_POLICY,
                 num_sms: int | None = None, timeout_ns: int = DEFAULT_TIMEOUT_NS, waves: float = SplitParams.waves,
                 kernel: KernelOptions | None = None, pad_steps: bool = True, host_steps: bool = True,
                 pad_headroom: bool = True, background_builds: bool = False, stream_store: bool = True,
                 tp_world: int = 1, tp_rank: int = 0, **split_kw: object) -> None:
        """Keywords named like a KernelOptions field (`--kernel-option NAME=VALUE`, engine/cuda/backend_options.py)
        set that field of `kernel`; the rest go to the scheduler's SplitParams. `pad_steps`: single steps of several
        token groups run padded to bucketed shapes (engine/cuda/step_padding.py; off in tests that compare the
        step's buffers with the VM's); `host_steps`: ... or, while their own shape's stream is not compiled, padded
        into a compiled larger one (engine/cuda/stream_hosting.py); `pad_headroom`: the engine's token budget
        leaves room for the dummy sequences' tokens, so a full step pads within its budget's token bucket
        (step_token_budget); `background_builds`: a hosted shape that recurs is compiled by a worker process
        meanwhile (engine/cuda/background_builds.py), not on the engine thread at its next step; off by default
        until serving is measured with the process worker (a worker thread measured slower: c=32 4 102 against
        5 656 tok/s, docs/PERFORMANCE.md); `stream_store`: compiled streams are kept on disk under
        $MEGAKERNEL_CACHE_DIR/streams and a later run loads them instead of compiling
        (engine/scheduler/compiler/stream_store.py); `tp_world`: the ranks of the tensor-parallel group this
        backend is rank `tp_rank` of (`weights` its megakernel shard, models/llama/tensor_parallel.py; its streams
        all-reduce the residual through the exchange memory `attach_tp` gives it before the first step:
        engine/backends/cuda_tensor_parallel.py; its greedy steps compute its share of the LM head,
        KernelOptions.tp_vocab_argmax)."""
        opts = {k: split_kw.pop(k) for k in list(split_kw) if k in KernelOptions.names()}
        self.kernel = replace(kernel or KernelOptions(), **opts)  # type: ignore[arg-type]
        split_kw.setdefault("min_pages_per_split", DEFAULT_MIN_PAGES_PER_SPLIT)
        # False: the streams have no EMBED and each launch's caller writes hidden (load_inputs; the bench's loop:
        # the previous step's ARGMAX_REDUCE, KernelOptions.fold_embed)
        self.embed_in_stream = bool(split_kw.get("embed_in_stream", True))
        if not torch.cuda.is_available():
            raise RuntimeError("backend 'cuda' needs a CUDA GPU")
        self._device = torch.device("cuda", torch.cuda.current_device())
        props = torch.cuda.get_device_properties(self._device)
        self.tuning = device_tuning(peak_memory_gbps(props))  # bandwidth-dependent defaults
        for name in ("max_inflight_pages", "chain_inflight_pages"):  # None: the device's
            if getattr(self.kernel, name) is None:
                self.kernel = replace(self.kernel, **{name: getattr(self.tuning, name)})
        self.module = load_extension("mk_interpreter")
        self.sampling_kernel = self.module
        self.limits = InterpreterLimits.of(self.module)
        self.config = weights.config
        self.dims = replace(ModelDims.from_config(self.config), tp_world=tp_world)
        self.limits.check_model(self.dims)
        self._tp_fields: dict[str, int] = {}
        packed = pack_weights(weights, torch.bfloat16)
        check_fp8_dims(packed, self.dims)
        fp8 = any(is_fp8(packed, name) for name in STREAMED_MATRICES)
        self.num_sms = num_sms or props.multi_processor_count
        step = fill_split_defaults(split_kw, self.limits, self.dims, self.kernel, fp8=fp8,
                                   w_o_fp8=is_fp8(packed, "w_o"), num_sms=self.num_sms,
                                   fast_memory=self.tuning.fuse_small_w_o)
        self.token_group, self.max_tokens_per_step = step.token_group, step.max_tokens_per_step
        self._bf16_rows = step.bf16_rows
        self.policy = policy
        self.timeout_ns = timeout_ns
        self.weights = {k: v.to(self._device) for k, v in kernel_weight_buffers(packed).items()}
        # The kernel's extra read-only buffers, passed like the weights: W_o's tensor map for the fused op's
        # panel pages (csrc/interpreter/panel_pages.cuh) where the option is on and head_dim allows it.
        self._kernel_buffers = dict(self.weights)
        panel_map = w_o_map(self.module, self.weights, self.dims) if step.w_o_panels else None
        if panel_map is not None:
            self._kernel_buffers["w_o_map"] = panel_map
        # One page past the engine's: the dummy sequences of padded steps write and read their K/V there.
        self.kv = PagedKVCache.allocate(self.config, num_pages=num_pages + 1, page_size=page_size,
                                        dtype=torch.bfloat16, device=self._device,
                                        head_dim=self.dims.head_dim)  # stored heads (head_padding.py)
        self._spare_page = num_pages
        self._pad_steps = pad_steps and self.max_tokens_per_step > self.limits.max_tokens_per_matvec
        self._pad_headroom = pad_headroom
        if background_builds and tp_world > 1:
            raise ValueError("background_builds: a tensor-parallel rank compiles every stream itself (each rank would "
                             "adopt a worker's stream at its own step)")
        hosting = (StreamHosting(self._spare_page, builds=BackgroundBuilds() if background_builds else None)
                   if self._pad_steps and host_steps else None)
        self.page_size = page_size
        direct_max_seqs = int(split_kw.get("lm_head_direct_max_seqs", 0))  # type: ignore[call-overload]
        fit = StreamFit(self.dims, page_size, self.kernel, self.limits, self.token_group, self._bf16_rows,
                        panel_map is not None, direct_max_seqs)
        # A tensor-parallel rank's streams for steps whose logits nobody reads: its share of the LM head (TP_ARGMAX)
        argmax_rank = tp_rank if tp_world > 1 and self.kernel.tp_vocab_argmax else None
        self.streams = FittedStreams(self.module, self.weights, fit, self._device, self.num_sms, policy, waves,
                                     split_kw, stream_store, hosting, argmax_rank)
        self.timing = False
        self.last: DeviceStream | None = None
        # The last run of decode steps' stop state on the device (csrc/interpreter/run_stop.cuh; None: that run had no
        # device stop checks): kept after the run for tests and post-mortems, a few words.
        self.last_run_stop: torch.Tensor | None = None
        self.run_timer = RunTimer()  # the runs' device time and the device's waits for the host (run_times)

    def step_token_budget(self, max_tokens: int, max_seqs: int) -> int:
        if not (self._pad_steps and self._pad_headroom) or max_tokens <= self.limits.max_tokens_per_matvec:
            return max_tokens
        return max(padded_budget(max_tokens, max_seqs), self.limits.max_tokens_per_matvec)

    def run_times(self) -> RunTimes:
        return self.run_timer.totals

    def stream_stats(self) -> StreamStats:
        return self.streams.stats()

    def attach_tp(self, peers: TpPeers) -> None:
        """The tensor-parallel exchange memory every launch passes (tp_world > 1)."""
        if self.dims.tp_world != peers.world:
            raise ValueError(f"exchange memory of {peers.world} ranks for a backend of {self.dims.tp_world}")
        if peers.slot_tokens < self.max_tokens_per_step:
            raise ValueError(f"exchange slots of {peers.slot_tokens} tokens for steps of {self.max_tokens_per_step}")
        self._tp_fields = peers.fields()

    def close(self) -> None:
        """End the stream-build worker process, where there is one."""
        hosting = self.streams.hosting
        if hosting is not None and hosting.builds is not None:
            hosting.builds.close()

    @contextmanager
    def warming_up(self, max_tokens: int, max_seqs: int, max_table_pages: int) -> Iterator[None]:
        hosting = self.streams.hosting
        if hosting is None:
            yield
            return
        # the hosts of new shapes: compiled, fitted to the kernel and run once
        with hosting.warming_up(self.greedy, max_tokens, max_seqs, max_table_pages, self.max_tokens_per_step):
            yield

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def batch_device(self) -> torch.device:
        # A step's batch is only read on the host (stream-cache key, step-args encoding): on the GPU, every read
        # of it would be a device-to-host copy and a synchronisation.
        return torch.device("cpu")

    def launch_fields(self, ds: DeviceStream) -> KernelFields:
        fields = ds.fields(self._kernel_buffers, self.kv.k, self.kv.v, self.dims, self.dims.gu_tile, self.timeout_ns,
                           self.kernel)
        fields["timeout_ns"] = max(self.timeout_ns, ds.timeout_ns)  # the step's allowance (engine/cuda/watchdog.py)
        fields["token_group"] = self.token_group
        # x rows the tensor cores take (csrc/interpreter/x_layout.cuh x_is_bf16): fp8 streams take one
        fields["mma_x_rows"] = self.limits.mma_group_cap if self._bf16_rows else 1
        if self.dims.tp_world > 1:
            if not self._tp_fields:
                raise RuntimeError("a tensor-parallel rank's backend launched before attach_tp")
            fields.update(self._tp_fields)
        return fields

    def _prepare(self, batch: StepBatch, feed: TokenFeed | None = None, step: StepBatch | None = None,
                 argmax_only: bool = False) -> DeviceStream:
        """The compiled stream of `batch`'s shape (or of a host's, for `step`; `argmax_only`: FittedStreams.compiled)
        with `batch`'s inputs on the device (`feed`'s slots from the previous step's ids there), ready to launch."""
        if batch.num_tokens > self.max_tokens_per_step:
            raise ValueError(f"step of {batch.num_tokens} tokens exceeds the megakernel's "
                             f"{self.max_tokens_per_step} tokens per step (the engine caps its token budget)")
        cs, batch = self.streams.compiled(batch, step, argmax_only)
        ds: DeviceStream = cs.backend_state  # type: ignore[assignment]
        if (ds.timing is not None) != self.timing:
            ds.enable_timing(self.timing, self.module.TIMING_WORDS)
        self.load_inputs(ds, feed)
        products = attention_products(batch.query_start, batch.context_lens, self.dims.n_heads, self.dims.head_dim)
        ds.timeout_ns = step_timeout_ns(self.timeout_ns, products, self.num_sms)
        self.last = ds
        return ds

    def _launch(self, ds: DeviceStream, advance_history: int = 0, run_stop: int = 0, run_step: int = 0) -> None:
        """One launch of `ds`; with `advance_history` (a device address) its ARGMAX_REDUCE writes the ids there and
        advances the step args to the next decode step (with the next embedding rows where the stream has no
        EMBED). With `run_stop` (a device address: the stop state of a run, csrc/interpreter/run_stop.cuh) it is
        step `run_step` of that run: it does no work if the run stopped at an earlier step, and with
        `advance_history` its ARGMAX_REDUCE checks the ids against the rows' stop rules."""
        ds.before_launch()
        fields = self.launch_fields(ds)
        if advance_history:
            fields["advance_history"] = advance_history
            fields["embed_next"] = int(not self.embed_in_stream)
        if run_stop:
            fields["run_stop"] = run_stop
            fields["run_step"] = run_step
        launch(self.module, ds, fields)
        ds.after_launch()

    def run(self, batch: StepBatch, step: StepBatch | None = None, argmax_only: bool = False) -> DeviceStream:
        """Launch one step (`step` padded to `batch`, where it may run hosted; `argmax_only`: FittedStreams.compiled);
        returns the stream state whose buffers hold logits (unless `argmax_only`) and out_tokens."""
        ds = self._prepare(batch, step=step, argmax_only=argmax_only)
        self._launch(ds)
        return ds

    def load_inputs(self, ds: DeviceStream, feed: TokenFeed | None = None) -> None:
        """The stream's step args to the device (with `feed`'s token slots), and its embedding rows into hidden where
        it has no EMBED."""
        ds.upload_step_args()
        if feed is not None and feed.src:
            ds.feed_tokens(feed.ids, *feed.index(self._device))
        if not self.embed_in_stream:
            ds.embed_inputs(self.weights["embed"])

    def _finish(self, ds: DeviceStream) -> torch.Tensor:
        status = ds.status.cpu()  # synchronises; error record and sampled ids in one copy
        ds.check(status)
        return status[ds.err_words:].to(torch.int64)

    def _pads(self, batch: StepBatch) -> bool:
        """Whether `batch` runs padded: more tokens than the CUDA cores' token group of 8 (the shapes of larger steps
        are many, so they are bucketed whatever the token group)."""
        return self._pad_steps and batch.num_tokens > self.limits.max_tokens_per_matvec

    def _padded(self, batch: StepBatch, whole_table: bool = False) -> StepBatch:
        """`batch` padded to a bucketed shape where it _pads and the padded step still fits the kernel's step
        (step_padding.py); `whole_table`: for a run of decode steps (pad_batch)."""
        if not self._pads(batch):
            return batch
        return pad_batch(batch, self._spare_page, whole_table, max_tokens=self.max_tokens_per_step)

    def _step(self, batch: StepBatch) -> StepBatch | None:
        """`batch` where a single step of it may run hosted (stream_hosting.py may_host), else None."""
        return batch if self.streams.hosting is not None and may_host(batch, self._pads(batch)) else None

    @torch.inference_mode()
    def forward(self, batch: StepBatch) -> torch.Tensor:
        ds = self.run(self._padded(batch), self._step(batch))
        self._finish(ds)
        return ds.acts["logits"][:batch.num_seqs].clone()

    @torch.inference_mode()
    def greedy(self, batch: StepBatch) -> torch.Tensor:
        return self._finish(self.run(self._padded(batch), self._step(batch), argmax_only=True))[:batch.num_seqs]

    @torch.inference_mode()
    def launch_step(self, batch: StepBatch, greedy: bool, feed: TokenFeed | None = None) -> StepHandle:
        """One step queued on the GPU; the host does not wait for it. The step-args upload is a blocking copy, so it
        starts once the step before (and its sampling) ran: `feed`'s index copy of that step's ids into this step's
        token slots is then stream-ordered behind it by construction. What the host overlaps is the scheduling and
        batch building before it, and the previous step's postprocessing after it."""
        if self.timing or feed is not None and feed.ids.device != self._device:
            return super().launch_step(batch, greedy, feed)
        # padding (or a host's) appends dummy rows: the fed slots stay where they are
        ds = self._prepare(self._padded(batch), feed, self._step(batch), argmax_only=greedy)
        self._launch(ds)
        return LaunchedStep(ds, batch.num_seqs, greedy)

    @torch.inference_mode()
    def decode_steps(self, batch: StepBatch, steps: int, page_size: int, on_records: OnRecords,
                     sampler: RunSampler | None = None, stops: RunStops | None = None) -> int:
        """Decode steps queued back to back on the GPU, the host never waiting between two of them
        (engine/cuda/device_decode_run.py); with `stops` the device checks each step's ids against the rows' stop
        rules. A run of more sequences than one token group runs padded to a bucketed count (step_padding.py): the
        dummy rows start stopped, the sampler and the advance kernel take only the real ones, and their ids never
        reach `on_records`."""
        self.last_run_stop = None
        if (steps == 1 or self.timing or (sampler is None and not self.kernel.fold_advance)
                or (sampler is not None and not self.embed_in_stream)):
            return super().decode_steps(batch, steps, page_size, on_records, sampler, stops)
        S = batch.num_seqs
        if stops is not None and len(stops.rows) != S:
            raise ValueError(f"stop rules for {len(stops.rows)} rows in a run of {S} sequences")
        batch = self._padded(batch, whole_table=True)
        rows = batch.num_seqs  # S, or S and the dummy rows
        ds = self._prepare(batch, argmax_only=sampler is None)
        # The run's stop state on the device (built once per run)
        state = torch.tensor(stops.words(rows), dtype=torch.int32).to(self._device) if stops is not None else None
        self.last_run_stop = state
        return run_decode_steps(ds, S, rows, steps, on_records, sampler, state, self._device, self._launch,
                                self._finish, self.module.advance, self.kernel.pdl, self.run_timer)

    def prefill(self, tokens: list[int], block_table: list[int], start: int = 0) -> int:
        """Run one sequence's tokens through the kernel in chunks it can hold; returns the last
        chunk's greedy id (benchmarks and profiles; the engine's scheduler chunks by itself)."""
        last = -1
        for begin in range(0, len(tokens), self.max_tokens_per_step):
            chunk = tokens[begin:begin + self.max_tokens_per_step]
            batch = StepBatch.build([chunk], [start + begin], [block_table], device=self.batch_device,
                                    page_size=self.page_size)
            last = int(self.greedy(batch)[0])
        return last
