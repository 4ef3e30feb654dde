from __future__ import annotations

import numpy as np
import pytest

from profiler.decode import decode_timings
from profiler.record import ProfileFormatError


def test_decode_static_schedule_drops_unexecuted_slots(rng):
    num_sms, queue, width = 4, 6, 8
    words = rng.integers(1, 4, size=(num_sms, queue, width)).astype(np.int32)
    base = 1_750_000_000_000_000_000
    start = base + rng.integers(0, 10_000, size=(num_sms, queue))
    end = start + rng.integers(1, 500, size=(num_sms, queue))
    wait_end = start - rng.integers(0, 50, size=(num_sms, queue))
    wait_start = wait_end - rng.integers(0, 300, size=(num_sms, queue))
    smid = np.broadcast_to(np.array([7, 3, 11, 0])[:, None], (num_sms, queue))
    timings = np.stack([start, end, wait_start, wait_end, smid], axis=-1)
    timings[1, 4:] = 0  # SM 1's queue was shorter
    rec = decode_timings(words, timings, {1: "a", 2: "b", 3: "c"}, meta={"gpu": "H100"})
    assert rec.num_instructions == num_sms * queue - 2 and not rec.simulated
    assert sorted(set(rec.sm.tolist())) == [0, 3, 7, 11]
    keep = np.ones((num_sms, queue), bool)
    keep[1, 4:] = False
    assert np.array_equal(rec.start_ns, start[keep]) and np.array_equal(rec.words, words[keep])
    assert np.array_equal(rec.wait_ns, (wait_end - wait_start)[keep])


def test_decode_shape_mismatch_is_named():
    with pytest.raises(ProfileFormatError, match="timings: expected shape"):
        decode_timings(np.ones((5, 8), np.int32), np.ones((5, 4), np.int64), {1: "a"})
