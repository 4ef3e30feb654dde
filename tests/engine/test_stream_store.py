"""Compiled streams on disk (engine/scheduler/compiler/stream_store.py): a second cache of the same settings loads what
the first compiled (no compile), with its step args for the step at hand; other settings or changed compiler code
are other directories; an unreadable file is compiled again and rewritten; old directories are pruned."""
from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import pytest

from engine.cuda.background_builds import BackgroundBuilds
from engine.instructions.layout import ModelDims
from engine.profiling import decode_batch
from engine.scheduler.compiler import step_builder_cache, stream_store
from engine.scheduler.compiler.step_builder_cache import BuildParams, StreamCache
from engine.scheduler.compiler.stream_payload import StreamPayload, compile_payload
from engine.scheduler.compiler.stream_store import KEEP_FINGERPRINTS, StreamStore
from engine.scheduler.compiler.target import TargetDevice
from models.llama.step_batch import StepBatch
from tests.vm.helpers import small_config

DIMS = ModelDims.from_config(small_config())
DEVICE = TargetDevice(num_sms=12)


def _cache(root: Path, params: BuildParams | None = None) -> StreamCache:
    params = params or BuildParams.of("lpt")
    return StreamCache(DIMS, 16, params, DEVICE, store=StreamStore(root, DIMS, 16, params, DEVICE))


def _compiled(cache: StreamCache, step: StepBatch) -> None:
    """`step`'s stream through `cache`, its file written (saves run on the store's writer thread)."""
    cache.get(step)
    assert isinstance(cache.store, StreamStore)
    cache.store.flush()


def _no_compile(*_: object) -> None:
    raise AssertionError("compiled: the stream should have been loaded")


def test_a_later_cache_loads_what_an_earlier_one_compiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _cache(tmp_path)
    cs = first.get(decode_batch(4, 20, 16))
    first.store.flush()  # type: ignore[union-attr]
    files = list(tmp_path.rglob("*.stream"))
    assert len(files) == 1
    second = _cache(tmp_path)
    monkeypatch.setattr(StreamCache, "compile", _no_compile)
    other_step = decode_batch(4, 25, 16)  # the same shape, other contexts: its own step args
    loaded = second.get(other_step)
    assert second.store is not None and second.store.loaded == 1  # type: ignore[attr-defined]
    np.testing.assert_array_equal(loaded.words, cs.words)
    np.testing.assert_array_equal(loaded.tensor, cs.tensor)
    expected = _cache(tmp_path / "fresh")
    monkeypatch.undo()
    np.testing.assert_array_equal(loaded.step_args.numpy(), expected.get(other_step).step_args.numpy())
    assert second.stats().misses == 1 and second.get(other_step) is loaded  # cached in memory from then on


def test_a_key_of_many_sequences_names_a_short_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A step of 128 sequences whose KV splits differ has a key of some 130 numbers: spelt out, a file name past the
    # file system's 255 bytes (the store could neither write nor read it).
    real = step_builder_cache.shape_key
    monkeypatch.setattr(step_builder_cache, "shape_key", lambda *a: real(*a) + (1,) * 150)
    step = decode_batch(4, 20, 16)
    _compiled(_cache(tmp_path), step)
    (path,) = tmp_path.rglob("*.stream")
    assert len(path.name) <= 200
    again = _cache(tmp_path)
    monkeypatch.setattr(StreamCache, "compile", _no_compile)
    again.get(step)
    assert again.store.loaded == 1  # type: ignore[union-attr]
    assert stream_store.stream_file_stem((4, 4, 2, 1)) == "4_4_2_1"  # short keys stay readable


def test_other_settings_are_another_directory(tmp_path: Path) -> None:
    _compiled(_cache(tmp_path), decode_batch(4, 20, 16))
    _compiled(_cache(tmp_path, BuildParams.of("dynamic")), decode_batch(4, 20, 16))
    assert len([d for d in tmp_path.iterdir() if d.is_dir()]) == 2


def test_changed_compiler_code_is_another_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = StreamStore(tmp_path, DIMS, 16, BuildParams.of("lpt"), DEVICE)
    monkeypatch.setattr(stream_store, "code_fingerprint", lambda: "other code")
    b = StreamStore(tmp_path, DIMS, 16, BuildParams.of("lpt"), DEVICE)
    assert a.dir != b.dir


def test_an_unreadable_file_is_compiled_again_and_rewritten(tmp_path: Path) -> None:
    _compiled(_cache(tmp_path), decode_batch(4, 20, 16))
    (path,) = tmp_path.rglob("*.stream")
    path.write_bytes(b"torn")
    again = _cache(tmp_path)
    _compiled(again, decode_batch(4, 20, 16))
    assert again.store.loaded == 0  # type: ignore[union-attr]
    step = decode_batch(4, 20, 16)
    assert _cache(tmp_path).store.load(again.key(step), step) is not None  # type: ignore[union-attr]


def test_directories_beyond_the_kept_ones_are_pruned(tmp_path: Path) -> None:
    for k in range(KEEP_FINGERPRINTS + 3):
        _compiled(_cache(tmp_path, BuildParams.of("lpt", waves=1.0 + k / 10)), decode_batch(2, 20, 16))
    assert len([d for d in tmp_path.iterdir() if d.is_dir()]) == KEEP_FINGERPRINTS


def test_a_background_build_writes_the_file_in_its_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A background build's worker process compiles and writes the file (stream_hosting.py submits
    StreamStore.compile_and_save): a later cache loads it."""
    cache = _cache(tmp_path)
    step = decode_batch(4, 20, 16)
    key = cache.key(step)
    builds: BackgroundBuilds[StreamPayload] = BackgroundBuilds()
    try:
        assert isinstance(cache.store, StreamStore)
        builds.submit(key, partial(cache.store.compile_and_save, key,
                                   partial(compile_payload, DIMS, step, 16, cache.params, DEVICE)))
        assert builds.wait(timeout=120)
        assert isinstance(builds.take(key), StreamPayload)
    finally:
        builds.close()
    monkeypatch.setattr(StreamCache, "compile", _no_compile)
    assert _cache(tmp_path).get(step).key == key
