"""A compiled stream as arrays and back (engine/scheduler/compiler/stream_payload.py: what a worker process hands the
engine thread): every array the backends run is the same, the instructions decode to the compiled ones, and the
schedule's simulated timeline is the one the compiled stream predicts."""
from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

from engine.instructions.layout import ModelDims
from engine.profiling import decode_batch
from engine.scheduler.compiler.step_builder_cache import BuildParams, compile_stream
from engine.scheduler.compiler.stream_payload import compile_payload, from_payload
from engine.scheduler.compiler.target import TargetDevice
from models.llama.step_batch import StepBatch
from tests.vm.helpers import small_config


@pytest.mark.parametrize("policy", ["rr", "lpt", "dynamic"])
@pytest.mark.parametrize("tiles", [False, True])
def test_a_payload_rebuilds_the_compiled_stream(policy: str, tiles: bool) -> None:
    d = ModelDims.from_config(small_config())
    batch = StepBatch.build([list(range(1, 40)), [7], [9, 10]], [0, 30, 12],
                            [[0, 1, 2], [3, 4], [5]], page_size=16)
    params = BuildParams.of(policy, tile_min_tokens=17 if tiles else None)
    device = TargetDevice(num_sms=12)
    cs = compile_stream(d, batch, 16, params, device)
    back = from_payload(pickle.loads(pickle.dumps(compile_payload(d, batch, 16, params, device))), d)
    assert back.key == cs.key and back.shape == cs.shape and back.page_size == cs.page_size
    assert back.stream.plan == cs.stream.plan and (back.stream.plan.tiles is not None) == tiles
    for got, want in ((back.words, cs.words), (back.tensor, cs.tensor), (back.durations, cs.durations),
                      (back.stream.counter_period, cs.stream.counter_period), (back.step_args.numpy(),
                                                                                 cs.step_args.numpy())):
        np.testing.assert_array_equal(got, want)
    assert back.stream.counter_names == cs.stream.counter_names
    assert len(back.stream.instrs) == len(cs.stream.instrs)
    for k in (0, len(cs.stream.instrs) // 2, -1):  # decoded from the words: the costs are in their headers now
        want = cs.stream.instrs[k]
        assert back.stream.instrs[k] == dataclasses.replace(
            want, header=dataclasses.replace(want.header, cost_ns=int(cs.stream.cost_ns[k])))
    assert list(back.costs) == list(cs.costs)
    s, t = back.schedule, cs.schedule
    assert (s.policy, s.num_sms, s.dynamic, s.queues, s.order) == (t.policy, t.num_sms, t.dynamic, t.queues, t.order)
    np.testing.assert_array_equal(s.timeline.end_ns, t.timeline.end_ns)
    back.patch(batch)  # the step args are its own (patched every step)
    np.testing.assert_array_equal(back.step_args.numpy(), cs.step_args.numpy())


def test_a_payload_of_a_decode_step_pickles_small() -> None:
    """The payload is arrays (no instruction objects): its pickle is the words and the tensor, about."""
    d = ModelDims.from_config(small_config())
    batch = decode_batch(4, 20, 16)
    p = compile_payload(d, batch, 16, BuildParams.of("lpt"), TargetDevice(num_sms=12))
    blob = pickle.dumps(p)
    assert len(blob) < 2 * (p.words.nbytes + p.tensor.nbytes) + 64 * 1024
