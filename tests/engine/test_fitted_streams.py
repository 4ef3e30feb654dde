"""The cuda backend's stream fitting (engine/cuda/fitted_streams.py) on the CPU: the 1B's steps compiled once and fitted
to the interpreter's limits (read from its headers), device state in one shared arena, tile maps for tile streams;
a stream that does not fit at one granularity is compiled at the next and never refitted; a step that fits none is
refused naming its shape and the reason; a tensor-parallel rank's argmax streams are kept apart."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from engine.cuda.device_stream import DeviceStream
from engine.cuda.fitted_streams import WAVES_LADDER, FittedStreams, StreamFit
from engine.cuda.kernel_options import KernelOptions
from engine.cuda.limits import InterpreterLimits
from engine.cuda.split_defaults import fill_split_defaults
from engine.instructions.layout import ModelDims
from engine.profiling import decode_batch
from models.llama.presets import preset_config
from tests.engine.test_split_defaults import _limits

CPU = torch.device("cpu")
PAGE = 16


class _Module(SimpleNamespace):
    """The extension's names the fitting reads; tile maps are encoded into the buffer it is given (here: counted)."""

    def __init__(self) -> None:
        super().__init__(ERR_WORDS=4, TILE_MAPS_BYTES=8 * 128, encoded=0)

    def encode_tile_maps(self, *args: object) -> None:
        self.encoded += 1


class _Refusing(InterpreterLimits):
    """Limits whose fit check refuses the first `refuse` streams it is asked about (`asked`: how many it was)."""
    refuse: int = 0
    asked: int = 0

    def fit_stream(self, *args: object, **kw: object) -> int:  # type: ignore[override]
        object.__setattr__(self, "asked", self.asked + 1)
        if self.refuse > 0:
            object.__setattr__(self, "refuse", self.refuse - 1)
            raise ValueError("x holds 9 rows, the block needs 12")
        return super().fit_stream(*args, **kw)  # type: ignore[arg-type]


def _streams(limits: InterpreterLimits | None = None, argmax_rank: int | None = None) -> tuple[FittedStreams, _Module]:
    lim = limits or _limits()
    dims = ModelDims.from_config(preset_config("llama-3.2-1b"))
    kernel = KernelOptions()
    split_kw: dict[str, object] = {"min_pages_per_split": 8}
    step = fill_split_defaults(split_kw, lim, dims, kernel, fp8=False, w_o_fp8=False, num_sms=132, fast_memory=True)
    fit = StreamFit(dims, PAGE, kernel, lim, step.token_group, step.bf16_rows, False,
                    int(split_kw.get("lm_head_direct_max_seqs", 0)))  # type: ignore[arg-type]
    module = _Module()
    weights = {name: torch.zeros(1) for name in ("w_qkv", "w_o", "w_gate_up", "w_down", "lm_head")}
    return FittedStreams(module, weights, fit, CPU, 132, "lpt", 1.0, split_kw, stored=False,
                         argmax_rank=argmax_rank), module


def test_a_step_is_compiled_and_fitted_once() -> None:
    streams, _ = _streams()
    batch = decode_batch(1, 33, PAGE)
    cs, ran = streams.compiled(batch)
    assert ran is batch and isinstance(cs.backend_state, DeviceStream)
    ds = cs.backend_state
    assert streams.fit.limits.min_ring_pages <= ds.ring_pages <= streams.fit.limits.max_ring_pages
    again, _ = streams.compiled(decode_batch(1, 33, PAGE))
    assert again is cs and streams.stats().misses == 1


def test_tile_streams_get_their_tensor_maps_and_share_the_arena() -> None:
    streams, module = _streams()
    wide, _ = streams.compiled(decode_batch(32, 40, PAGE))
    small, _ = streams.compiled(decode_batch(1, 40, PAGE))
    assert wide.stream.plan.tiles is not None and wide.backend_state.tile_maps is not None and module.encoded == 1
    assert small.stream.plan.tiles is None and small.backend_state.tile_maps is None
    shared = wide.backend_state.acts["hidden"]
    assert small.backend_state.acts["hidden"].untyped_storage().data_ptr() == shared.untyped_storage().data_ptr()


def test_a_stream_too_big_at_one_granularity_is_taken_at_the_next() -> None:
    lim = _Refusing(**_limits().__dict__)
    object.__setattr__(lim, "refuse", 2)
    streams, _ = _streams(lim)
    batch = decode_batch(4, 40, PAGE)
    cs, _ = streams.compiled(batch)
    third = streams.caches[2]
    assert third.get(batch, third.key(batch)) is cs  # the first two granularities refused
    for cache in streams.caches[:2]:
        assert cache.get(batch, cache.key(batch)).backend_state is False
    assert streams.compiled(batch)[0] is cs and lim.asked == 3  # fitted once each, the refusals not asked again


def test_a_step_that_fits_no_granularity_is_refused_with_its_shape_and_reason() -> None:
    lim = _Refusing(**_limits().__dict__)
    object.__setattr__(lim, "refuse", len(WAVES_LADDER))
    streams, _ = _streams(lim)
    with pytest.raises(ValueError, match=r"T=3, S=3\) does not fit the megakernel: x holds 9 rows"):
        streams.compiled(decode_batch(3, 40, PAGE))


def test_a_tensor_parallel_rank_keeps_its_argmax_streams_apart() -> None:
    streams, _ = _streams(argmax_rank=1)
    assert streams.argmax_caches is not streams.caches
    assert all(c.params.split.tp_vocab_rank == 1 for c in streams.argmax_caches)
    streams.compiled(decode_batch(1, 33, PAGE))
    streams.compiled(decode_batch(1, 33, PAGE), argmax_only=True)
    assert streams.stats().misses == 2
