from __future__ import annotations

import numpy as np
import pytest

from engine.instructions.format import W_ID, W_LAYER, W_OPCODE
from profiler.phases import LayerSpanStats, layer_phases, layer_spans, render_layer_spans
from profiler.record import ProfileRecord


def _words(rows: list[tuple[int, int, int]]) -> np.ndarray:
    w = np.zeros((len(rows), 32), np.int32)
    for i, (op, iid, layer) in enumerate(rows):
        w[i, W_OPCODE], w[i, W_ID], w[i, W_LAYER] = op, iid, layer
    return w


def test_phases_chain_ops_across_layers_and_steps(rng):
    # One step: embed (layer -1), then layers 0 and 1 with ops A (2 instrs) then B; repeated as step 2.
    rows = [(9, 0, -1), (1, 1, 0), (1, 2, 0), (2, 3, 0), (1, 4, 1), (1, 5, 1), (2, 6, 1)]
    start = np.array([0, 0, 1, 3, 8, 8, 12])
    wait = np.array([0, 2, 4, 5, 2, 3, 4])
    end = np.array([2, 6, 7, 10, 14, 15, 20])
    t0 = int(rng.integers(1, 2**40))
    rec = ProfileRecord(words=np.concatenate([_words(rows)] * 2), sm=np.zeros(14, np.int32),
                        start_ns=np.concatenate([start, start + 100]) + t0,
                        end_ns=np.concatenate([end, end + 100]) + t0, wait_ns=np.concatenate([wait, wait]),
                        opcode_names={1: "A", 2: "B", 9: "E"}, simulated=False)
    a, b = layer_phases(rec)
    assert (a.name, b.name, a.layers, b.layers) == ("A", "B", 4, 4)
    # A: layer 0 ends 7 after embed's 2 -> 5; layer 1 ends 15 after B's 10 -> 5.
    assert a.phase_ns == pytest.approx(5.0)
    # ready = start + wait; A's first ready: layer 0 min(2, 5)=2 -> lag 0; layer 1 min(10, 11) -> lag 0.
    assert a.ready_lag_ns == pytest.approx(0.0)
    # B: layer 0 10 - 7 = 3, layer 1 20 - 15 = 5 -> 4; lags 8-7=1, 16-15=1.
    assert (b.phase_ns, b.ready_lag_ns) == (pytest.approx(4.0), pytest.approx(1.0))
    assert a.exec_ns == pytest.approx(np.mean([4, 2, 4, 4])) and b.exec_max_ns == 4


def test_layer_spans_compare_the_first_layer_with_the_rest(rng):
    # The record above, with layer 0 slowed by 3 ns in its second step: spans are chained from the end of
    # what ran before each layer (the embedding, then layer 0).
    rows = [(9, 0, -1), (1, 1, 0), (1, 2, 0), (2, 3, 0), (1, 4, 1), (1, 5, 1), (2, 6, 1)]
    start = np.array([0, 0, 1, 3, 8, 8, 12])
    end = np.array([2, 6, 7, 10, 14, 15, 20])
    slow = end + np.array([0, 0, 0, 3, 3, 3, 3])  # step 2: layer 0 ends at 13, layer 1 then takes 10 again
    t0 = int(rng.integers(1, 2**40))
    rec = ProfileRecord(words=np.concatenate([_words(rows)] * 2), sm=np.zeros(14, np.int32),
                        start_ns=np.concatenate([start, start + 100]) + t0,
                        end_ns=np.concatenate([end, slow + 100]) + t0, wait_ns=np.zeros(14, np.int64),
                        opcode_names={1: "A", 2: "B", 9: "E"}, simulated=False)
    spans = layer_spans(rec)
    assert spans is not None and spans.layers == 2
    assert spans.first_ns == pytest.approx((8 + 11) / 2)  # 10 - 2 and 113 - 102
    assert (spans.rest_mean_ns, spans.rest_min_ns, spans.rest_max_ns) == (10.0, 10.0, 10.0)
    line = render_layer_spans(LayerSpanStats(16, 59_400.0, 43_000.0, 41_800.0, 43_700.0))
    assert line == ["layer spans: layer 0 59.4 µs, layers 1-15 mean 43.0 (41.8..43.7) µs; the first layer costs "
                    "16.4 µs more"]


def test_layer_spans_need_two_layers() -> None:
    rows = [(9, 0, -1), (1, 1, 0), (2, 2, 0)]
    rec = ProfileRecord(words=_words(rows), sm=np.zeros(3, np.int32), start_ns=np.array([0, 2, 4]),
                        end_ns=np.array([2, 4, 6]), wait_ns=np.zeros(3, np.int64),
                        opcode_names={1: "A", 2: "B", 9: "E"}, simulated=False)
    assert layer_spans(rec) is None and render_layer_spans(None) == []
