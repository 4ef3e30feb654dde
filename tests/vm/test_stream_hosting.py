"""Steps of new shapes run padded in a compiled larger stream (engine/cuda/stream_hosting.py): on the VM, which runs
the same instruction tensors as the GPU, their logits are the torch reference's, the race detector stays quiet, and
a shape is compiled only once it recurs."""
from __future__ import annotations

import os
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from types import SimpleNamespace

import pytest

from engine.backends.vm_backend import VMBackend
from engine.cuda.background_builds import MAX_UNCLAIMED, BackgroundBuilds
from engine.cuda.step_padding import can_pad, dummy_step, host_ladder, largest_counts, pad_batch
from engine.cuda.stream_hosting import DEFAULT_COMPILE_AFTER, StreamHosting, seq_splits, smallest_host
from engine.instructions.layout import StepShape
from engine.profiling import decode_batch
from engine.scheduler.compiler.step_builder_cache import StreamStats
from tests.vm.helpers import random_weights, run_pair, small_config


def fake(tokens: int, seqs: int, pages: int = 64, usable: bool = True) -> SimpleNamespace:
    return SimpleNamespace(shape=StepShape(tokens, seqs, pages), usable=usable)


def test_can_pad_needs_a_dummy_sequence_for_added_tokens() -> None:
    assert can_pad(30, 3, 30, 3) and can_pad(30, 3, 64, 8) and can_pad(30, 3, 35, 8)
    assert not can_pad(30, 3, 64, 3)  # tokens added with no dummy sequence to carry them
    assert not can_pad(30, 3, 34, 8)  # five dummies need five tokens
    assert not can_pad(30, 3, 24, 4) and not can_pad(30, 3, 64, 2)


def test_the_smallest_usable_host_that_fits_is_chosen() -> None:
    step = decode_batch(3, 40, 8)  # 3 tokens, 3 sequences, 5-page tables
    streams = [fake(128, 16), fake(16, 4, usable=False), fake(32, 8), fake(24, 2), fake(32, 6, pages=4), fake(48, 8)]
    pick = smallest_host(streams, step, 1000, lambda cs: cs.usable)  # type: ignore[arg-type]
    assert pick is streams[2]
    assert smallest_host(streams, step, 31, lambda cs: cs.usable) is None  # type: ignore[arg-type]


def test_a_new_shape_runs_hosted_until_it_recurs_then_compiles() -> None:
    cfg = small_config()
    seen: list[tuple[StepShape, int, int]] = []

    def record(vm: VMBackend) -> None:
        assert vm.last_stream is not None
        stats = vm.stream_stats()
        seen.append((vm.last_stream.shape, stats.misses, stats.hosted))

    # the first three keep 10 tokens pending for every small step
    prompts = [8 + 10 * (DEFAULT_COMPILE_AFTER + 1)] * 3 + [30, 20, 12, 9]
    host_step = [8] * 7  # 56 tokens over 7 sequences: padded to 64 over 8, compiled
    small = [10, 10, 10, 0, 0, 0, 0]  # 30 over 3: padded to 32 over 4, a shape with no stream
    schedule = [host_step] + [small] * (DEFAULT_COMPILE_AFTER + 1)
    run_pair(cfg, random_weights(cfg, seed=5), schedule, prompts, check_races=True, after_step=record, pad_over=8)
    host = StepShape(64, 8, 64)
    assert seen[0] == (host, 1, 0)
    for k in range(1, DEFAULT_COMPILE_AFTER + 1):  # hosted: no compile, the host's stream
        assert seen[k] == (host, 1, k)
    assert seen[-1] == (StepShape(32, 4, 64), 2, DEFAULT_COMPILE_AFTER)  # recurred: its own stream


def test_a_recurring_shape_compiles_off_the_engine_thread_while_hosted() -> None:
    """With background builds (`background_builds=1` on the cuda backend), the step that would compile stays hosted,
    its stream is compiled by the worker process, and the next step of the shape adopts it (rebuilt from the worker's
    arrays, its instructions decoded from the words): no compile on the calling thread, and the adopted stream's step
    matches the reference with the race detector on."""
    cfg = small_config()
    seen: list[tuple[StepShape, int, int, int]] = []

    def record(vm: VMBackend) -> None:
        assert vm.last_stream is not None and vm.hosting is not None
        if vm.hosting.builds is None:  # from the first hosted step on
            vm.hosting.builds = BackgroundBuilds()
        assert vm.hosting.builds.wait(timeout=60)  # a submitted compile finishes before the next step
        stats = vm.stream_stats()
        seen.append((vm.last_stream.shape, stats.misses, stats.hosted, stats.background))

    prompts = [8 + 10 * (DEFAULT_COMPILE_AFTER + 2)] * 3 + [30, 20, 12, 9]
    schedule = [[8] * 7] + [[10, 10, 10, 0, 0, 0, 0]] * (DEFAULT_COMPILE_AFTER + 2)
    builds: list[BackgroundBuilds[object]] = []

    def record_and_keep(vm: VMBackend) -> None:
        record(vm)
        assert vm.hosting is not None and vm.hosting.builds is not None
        builds[:] = [vm.hosting.builds]

    try:
        run_pair(cfg, random_weights(cfg, seed=5), schedule, prompts, check_races=True, after_step=record_and_keep,
                 pad_over=8)
    finally:
        for b in builds:
            b.close()
    host = StepShape(64, 8, 64)
    for k in range(1, DEFAULT_COMPILE_AFTER + 2):  # the ninth is hosted too: its compile runs on the worker
        assert seen[k] == (host, 1, k, 0)
    assert seen[-1] == (StepShape(32, 4, 64), 1, DEFAULT_COMPILE_AFTER + 1, 1)  # adopted: no compile here


def test_background_builds_hand_back_results_and_errors_by_key() -> None:
    builds: BackgroundBuilds[int] = BackgroundBuilds(processes=False)  # lambdas: a thread worker
    assert builds.take((1,)) is None
    builds.submit((1,), lambda: 41 + 1)
    builds.submit((1,), lambda: 0)  # pending or done: not run again
    builds.submit((2,), lambda: 1 // 0)
    assert builds.wait(timeout=10)
    assert builds.take((1,)) == 42 and builds.take((1,)) is None
    assert isinstance(builds.take((2,)), ZeroDivisionError)
    for k in range(MAX_UNCLAIMED + 3):  # unclaimed results are bounded: the oldest go
        builds.submit((10 + k,), lambda k=k: k)  # type: ignore[misc]
    assert builds.wait(timeout=10)
    assert builds.take((10,)) is None and builds.take((10 + MAX_UNCLAIMED + 2,)) == MAX_UNCLAIMED + 2


def test_a_worker_process_hands_back_results_errors_and_a_dead_worker() -> None:
    builds: BackgroundBuilds[object] = BackgroundBuilds()
    try:
        builds.submit((1,), partial(pow, 2, 10))
        builds.submit((2,), partial(divmod, 1, 0))
        assert builds.wait(timeout=60)
        assert builds.take((1,)) == 1024 and isinstance(builds.take((2,)), ZeroDivisionError)
        builds.submit((3,), partial(os._exit, 3))  # the worker dies: an error for its key, then for every later one
        assert builds.wait(timeout=60)
        assert isinstance(builds.take((3,)), BrokenProcessPool)
        builds.submit((4,), partial(pow, 2, 2))
        assert builds.wait(timeout=60) and isinstance(builds.take((4,)), BrokenProcessPool)
    finally:
        builds.close()


def test_a_mixed_run_of_shapes_matches_the_reference_hosted() -> None:
    cfg = small_config()
    prompts = [33, 27, 21, 17, 13, 11, 9, 5]
    schedule: list[list[int | None]] = [[12] * 8, [9, 9, 0, 0, 9, 0, 0, 0], [None, 3, 3, 3, 0, 0, 0, 0],
                                        [1] * 8, [0, None, None, 2, 2, 2, 0, 0], [None] * 8, [1] * 8]
    vm = run_pair(cfg, random_weights(cfg, seed=6), schedule, prompts, check_races=True, pad_over=8)
    assert vm.stream_stats().hosted >= 2


def test_hosting_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="compile_after"):
        StreamHosting(0, compile_after=-1)
    with pytest.raises(ValueError, match="max_growth"):
        StreamHosting(0, max_growth=0)


def test_the_warm_up_compiles_every_shape_and_then_the_host_of_new_ones() -> None:
    cfg = small_config()
    vm = VMBackend(random_weights(cfg, seed=7), 64, 8, num_sms=8, pad_over=8)
    spare = 64
    with vm.warming_up(max_tokens=40, max_seqs=6, max_table_pages=8):
        vm.forward(dummy_step(64, 8, 8, spare))  # a larger stream exists ...
        vm.forward(dummy_step(20, 4, 8, spare))  # ... yet this shape is compiled: the warm-up's shapes are serving's
    ladder = host_ladder(40, 6)  # then the hosts, up to the largest step's counts
    assert ladder[-1] == largest_counts(40, 6) and len(ladder) == 6
    assert vm.stream_stats() == StreamStats(hits=0, misses=2 + 6, build_seconds=vm.stream_stats().build_seconds)
    assert vm.last_stream is not None and vm.last_stream.shape == StepShape(*ladder[-1], 64)
    vm.forward(dummy_step(30, 3, 8, spare))  # a new shape after the warm-up: hosted by the smallest that fits it
    assert vm.stream_stats().hosted == 1 and vm.last_stream.shape == StepShape(48, 8, 64)
    with pytest.raises(ValueError, match="does not pad"):
        pad_batch(dummy_step(30, 3, 8, spare), spare, counts=(64, 3))


def test_a_few_decodes_run_hosted_and_a_lone_sequence_never() -> None:
    cfg = small_config()
    vm = VMBackend(random_weights(cfg, seed=8), 64, 8, num_sms=8, pad_over=8)
    vm.forward(decode_batch(8, 20, 8))  # 8 decodes: compiled
    vm.forward(decode_batch(5, 20, 8))  # 5 decodes: run in the 8's stream with 3 dummy sequences
    assert vm.stream_stats().hosted == 1 and vm.last_stream is not None and vm.last_stream.shape.num_seqs == 8
    vm.forward(decode_batch(1, 20, 8))  # one sequence: its own stream
    assert vm.stream_stats().hosted == 1 and vm.last_stream.shape.num_seqs == 1


def test_a_host_of_the_steps_own_counts_is_never_replaced_by_a_compile() -> None:
    cfg = small_config()
    vm = VMBackend(random_weights(cfg, seed=9), 64, 8, num_sms=8, pad_over=8)
    vm.forward(dummy_step(32, 4, 200, 64))  # 32 over 4 with 256-page tables (a wider table key)
    for _ in range(DEFAULT_COMPILE_AFTER + 3):
        vm.forward(dummy_step(30, 3, 3, 64))  # pads to 32 over 4: the same counts, a 64-page key
    stats = vm.stream_stats()
    assert stats.misses == 1 and stats.hosted == DEFAULT_COMPILE_AFTER + 3


def test_a_keys_splits_per_sequence() -> None:
    assert seq_splits((64, 4, 64, 2)) == (2, 2, 2, 2)
    assert seq_splits((64, 3, 64, 2, 1, 2, 4)) == (1, 2, 4)
