"""DeviceStream.fields: the kernel's Globals of one stream, built on the CPU (no kernel runs): a stream with tiles takes
the loader's tile cap (KernelOptions.tile_inflight_pages) in place of max_inflight_pages, one without keeps it."""
from __future__ import annotations

import torch

from engine.cuda.device_stream import DeviceStream
from engine.cuda.kernel_options import KernelOptions
from engine.instructions.layout import ModelDims
from engine.profiling import decode_batch
from engine.scheduler.compiler.step_builder_cache import BuildParams, compile_stream
from engine.scheduler.compiler.target import TargetDevice
from models.llama.presets import preset_config


def _fields(kernel: KernelOptions, tiles: bool) -> dict[str, object]:
    d = ModelDims.from_config(preset_config("tiny"))
    cs = compile_stream(d, decode_batch(12, 20, 16), 16, BuildParams.of("lpt"), TargetDevice(16))
    ds = DeviceStream.create(cs, d, torch.device("cpu"), err_words=8, ring_pages=12)
    if tiles:
        ds.tile_maps = torch.zeros(8, dtype=torch.uint8)
    cache = torch.zeros((d.layers, 64, 16, d.n_kv, d.head_dim))
    return ds.fields({}, cache, cache, d, gu_tile=8, timeout_ns=10**9, kernel=kernel)


def test_streams_with_tiles_take_the_tile_cap() -> None:
    caps = dict(max_inflight_pages=4, chain_inflight_pages=2)
    assert _fields(KernelOptions(**caps), tiles=False)["max_inflight_pages"] == 4
    assert _fields(KernelOptions(**caps), tiles=True)["max_inflight_pages"] == KernelOptions.tile_inflight_pages
    assert _fields(KernelOptions(**caps, tile_inflight_pages=6), tiles=True)["max_inflight_pages"] == 6
    assert _fields(KernelOptions(**caps, tile_inflight_pages=None), tiles=True)["max_inflight_pages"] == 4
    assert _fields(KernelOptions(**caps), tiles=True)["chain_inflight_pages"] == 2
